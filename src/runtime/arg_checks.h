/*
 * Argument checks shared by the ops' entry points (plans, weave_gemm, weave_gemm_ex); the public
 * weave_row_split (weave.h) is defined beside them. Host only, no CUDA.
 */
#ifndef WEAVE_RUNTIME_ARG_CHECKS_H
#define WEAVE_RUNTIME_ARG_CHECKS_H

#include "weave.h"

/* The shape checks shared by plans, weave_gemm and weave_gemm_ex: M, N, K >= 1 and no product of two of
 * them above 64 x INT_MAX. Messages name fn and call K `k_name`. */
weave_result_t weave_check_gemm_shape(weave_team_t team, const char *fn, int M, int N, int K, const char *k_name);
/* The checks of the fp8 options (output type, scale mode, accumulation, B layout, K) shared by plans
 * and weave_gemm_ex; dtype itself must be valid already. Messages name fn and call K `k_name`. */
weave_result_t weave_check_fp8_args(weave_team_t team, const char *fn, weave_dtype_t dtype, weave_dtype_t out_dtype,
                                    weave_layout_t b_layout, weave_scale_mode_t scale_mode, weave_fp8_accum_t fp8_accum,
                                    int K, const char *k_name);

#endif
