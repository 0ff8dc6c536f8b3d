/* cuBLASLt wrapper (see lt.h). Row-major C = A.B is computed as column-major C^T = B^T . A^T. */
#include "plan/lt.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/dtype.h"

struct weave_lt {
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo; /* the heuristic's first choice for 256-byte aligned pointers (its default) */
  /* for less aligned pointers, by log2 of their alignment (weave_lt_alignment): picked at create
   * (lt_pick; picked[i] 1 found, -1 none, 0 to be tried again) */
  cublasLtMatmulAlgo_t algo_at[8];
  signed char picked[8];
  void *workspace;
  size_t workspace_bytes;
  int scale_mode; /* weave_scale_mode_t: which scale pointers a call sets */
  /* cuBLASLt refuses scale pointers that are not 16-byte aligned (seen: a per-tensor scale at 4
   * bytes past an allocation), which a caller's may be (a view of a larger tensor): such a call's
   * scales are copied here first, scale_b's (ROW: N) then scale_a's (ROW: M), each 16-byte aligned */
  float *scale_copy;
  size_t copy_b_floats, copy_a_floats; /* room for each: N and M rounded up to 4 (TENSOR: 4) */
  int M, N;
};

static cudaDataType_t to_cuda(weave_dtype_t t) {
  return t == WEAVE_BF16       ? CUDA_R_16BF
         : t == WEAVE_FP16     ? CUDA_R_16F
         : t == WEAVE_FP8_E4M3 ? CUDA_R_8F_E4M3
                               : CUDA_R_32F;
}

void weave_lt_destroy(weave_lt_t *lt) {
  if (!lt) return;
  if (lt->la) cublasLtMatrixLayoutDestroy(lt->la);
  if (lt->lb) cublasLtMatrixLayoutDestroy(lt->lb);
  if (lt->lc) cublasLtMatrixLayoutDestroy(lt->lc);
  if (lt->desc) cublasLtMatmulDescDestroy(lt->desc);
  if (lt->handle) cublasLtDestroy(lt->handle);
  if (lt->workspace) cudaFree(lt->workspace);
  if (lt->scale_copy) cudaFree(lt->scale_copy);
  free(lt);
}

#define LT_TRY(call)                                                     \
  do {                                                                   \
    cublasStatus_t st_ = (call);                                         \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                  \
      snprintf(errmsg, errlen, "%s failed: status %d", #call, (int)st_); \
      weave_lt_destroy(lt);                                              \
      return WEAVE_ERROR_CUDA;                                           \
    }                                                                    \
  } while (0)

/* cuBLASLt's first choice for pointers aligned to `align` bytes (a power of two <= 256): the heuristic
 * assumes 256 unless told less, and an algorithm picked for 256 may fault on less (TMA loads, vector
 * accesses). CUBLAS_STATUS_NOT_SUPPORTED when it has none. */
static cublasStatus_t lt_heuristic(weave_lt_t *lt, uint32_t align, cublasLtMatmulAlgo_t *algo) {
  cublasLtMatmulPreference_t pref;
  cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  static const cublasLtMatmulPreferenceAttributes_t aligns[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt->workspace_bytes,
                                            sizeof(lt->workspace_bytes));
  for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]) && st == CUBLAS_STATUS_SUCCESS; ++i)
    st = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof(align));
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt->handle, lt->desc, lt->la, lt->lb, lt->lc, lt->lc, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found == 0) st = CUBLAS_STATUS_NOT_SUPPORTED;
  if (st == CUBLAS_STATUS_SUCCESS) *algo = res.algo;
  return st;
}

/* algo_at's slot for `align` (a power of two < 256), filled unless known: 1 found, -1 cuBLASLt has
 * none (for good), 0 the query failed otherwise (tried again on the next use). */
static int lt_pick(weave_lt_t *lt, unsigned align) {
  int i = 0;
  while ((1u << (i + 1)) <= align) ++i;
  if (!lt->picked[i]) {
    const cublasStatus_t st = lt_heuristic(lt, align, &lt->algo_at[i]);
    lt->picked[i] = st == CUBLAS_STATUS_SUCCESS ? 1 : st == CUBLAS_STATUS_NOT_SUPPORTED ? -1 : 0;
  }
  return i;
}

weave_result_t weave_lt_create(int M, int N, int K, weave_dtype_t in, weave_dtype_t out, weave_layout_t b_layout,
                               int sm_target, weave_lt_t **out_lt, char *errmsg, size_t errlen) {
  weave_lt_opts_t o = WEAVE_LT_OPTS_INIT;
  o.sm_target = sm_target;
  return weave_lt_create_ex(M, N, K, in, out, b_layout, &o, out_lt, errmsg, errlen);
}

weave_result_t weave_lt_create_ex(int M, int N, int K, weave_dtype_t in, weave_dtype_t out, weave_layout_t b_layout,
                                  const weave_lt_opts_t *opts, weave_lt_t **out_lt, char *errmsg, size_t errlen) {
  const weave_lt_opts_t defaults = WEAVE_LT_OPTS_INIT;
  if (!opts) opts = &defaults;
  const int sm_target = opts->sm_target, fp8 = in == WEAVE_FP8_E4M3;
  if (fp8 && b_layout != WEAVE_LAYOUT_COL) {
    snprintf(errmsg, errlen, "cuBLASLt fp8 needs B as [N, K] (WEAVE_LAYOUT_COL)");
    return WEAVE_ERROR_INVALID_ARGUMENT;
  }
  weave_lt_t *lt = (weave_lt_t *)calloc(1, sizeof(*lt));
  if (!lt) {
    snprintf(errmsg, errlen, "host allocation failed");
    return WEAVE_ERROR_OUT_OF_MEMORY;
  }
  lt->scale_mode = fp8 ? opts->scale_mode : WEAVE_SCALE_NONE;
  lt->M = M;
  lt->N = N;
  LT_TRY(cublasLtCreate(&lt->handle));
  LT_TRY(cublasLtMatmulDescCreate(&lt->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  /* "A" of the column-major product is B^T [N, K]. fp8 takes only this "TN" form (both K-major). */
  cublasOperation_t opa = b_layout == WEAVE_LAYOUT_ROW ? CUBLAS_OP_N : CUBLAS_OP_T, opb = CUBLAS_OP_N;
  LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  if (fp8) {
    const int8_t fast = opts->fast_accum ? 1 : 0;
    LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    if (lt->scale_mode == WEAVE_SCALE_ROW) {
      /* cuBLASLt's A is our B (its M = our N): its A scales are our scale_b [N], its B scales our
       * scale_a [M] (swapped at run time) */
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
      LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
    }
    if (lt->scale_mode != WEAVE_SCALE_NONE) {
      /* any device address for the heuristic (the calls set their own); it only has to be non-NULL */
      static const float *const placeholder = (const float *)(uintptr_t)256;
      LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &placeholder,
                                            sizeof(placeholder)));
      LT_TRY(cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &placeholder,
                                            sizeof(placeholder)));
    }
  }
  if (sm_target > 0)
    LT_TRY(
        cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sm_target, sizeof(sm_target)));
  if (b_layout == WEAVE_LAYOUT_ROW)
    LT_TRY(cublasLtMatrixLayoutCreate(&lt->la, to_cuda(in), N, K, N));
  else
    LT_TRY(cublasLtMatrixLayoutCreate(&lt->la, to_cuda(in), K, N, K));
  LT_TRY(cublasLtMatrixLayoutCreate(&lt->lb, to_cuda(in), K, M, K));
  LT_TRY(cublasLtMatrixLayoutCreate(&lt->lc, to_cuda(out), N, M, N));
  lt->workspace_bytes = 64u << 20;
  if (cudaMalloc(&lt->workspace, lt->workspace_bytes) != cudaSuccess) {
    cudaGetLastError();
    lt->workspace = NULL;
    snprintf(errmsg, errlen, "cudaMalloc of the cuBLASLt workspace failed");
    weave_lt_destroy(lt);
    return WEAVE_ERROR_OUT_OF_MEMORY;
  }
  if (lt->scale_mode != WEAVE_SCALE_NONE) {
    const int row = lt->scale_mode == WEAVE_SCALE_ROW;
    lt->copy_b_floats = row ? ((size_t)N + 3) / 4 * 4 : 4;
    lt->copy_a_floats = row ? ((size_t)M + 3) / 4 * 4 : 4;
    if (cudaMalloc((void **)&lt->scale_copy, (lt->copy_b_floats + lt->copy_a_floats) * sizeof(float)) != cudaSuccess) {
      cudaGetLastError();
      lt->scale_copy = NULL;
      snprintf(errmsg, errlen, "cudaMalloc of %zu scale floats failed", lt->copy_b_floats + lt->copy_a_floats);
      weave_lt_destroy(lt);
      return WEAVE_ERROR_OUT_OF_MEMORY;
    }
  }
  cublasStatus_t st = lt_heuristic(lt, 256, &lt->algo);
  if (st != CUBLAS_STATUS_SUCCESS) {
    snprintf(errmsg, errlen, "cuBLASLt found no algorithm for %dx%dx%d (status %d)", M, N, K, (int)st);
    weave_lt_destroy(lt);
    return WEAVE_ERROR_UNSUPPORTED;
  }
  /* and for every lesser alignment a call's pointers can have (down to the smaller element; fp8 A
   * and B at least 16 bytes, as execute requires), here rather than at a call's first use, which
   * may be inside graph capture */
  const unsigned out_bytes = (unsigned)weave_dtype_size(out), in_least = fp8 ? 16u : (unsigned)weave_dtype_size(in);
  for (unsigned align = in_least < out_bytes ? in_least : out_bytes; align < 256; align <<= 1) lt_pick(lt, align);
  *out_lt = lt;
  return WEAVE_SUCCESS;
}

/* The algorithm for these pointers: the one picked for 256-byte alignment when all are, else the
 * one for their alignment (picked at create; one that failed there is tried again, a host-only
 * query); NULL when cuBLASLt has none. */
static const cublasLtMatmulAlgo_t *lt_algo_for(weave_lt_t *lt, const void *A, const void *B, const void *C) {
  const unsigned align = weave_lt_alignment(A, B, C);
  if (align >= 256) return &lt->algo;
  const int i = lt_pick(lt, align);
  return lt->picked[i] > 0 ? &lt->algo_at[i] : NULL;
}

weave_result_t weave_lt_select(weave_lt_t *lt, const void *A, const void *B, const void *C) {
  return lt_algo_for(lt, A, B, C) ? WEAVE_SUCCESS : WEAVE_ERROR_UNSUPPORTED;
}

weave_result_t weave_lt_run(weave_lt_t *lt, float alpha, const void *A, const void *B, void *C, weave_stream_t stream) {
  return weave_lt_run_scaled(lt, alpha, A, B, NULL, NULL, C, stream);
}

/* *scales, n floats, as cuBLASLt takes them: unchanged when 16-byte aligned, else copied into `copy`
 * on the stream and *scales pointed there. Nonzero when the copy could not be enqueued. */
static int lt_aligned_scales(size_t n, float *copy, const float **scales, weave_stream_t stream) {
  if (((uintptr_t)*scales & 15) == 0) return 0;
  if (cudaMemcpyAsync(copy, *scales, n * sizeof(float), cudaMemcpyDeviceToDevice, (cudaStream_t)stream) != cudaSuccess)
    return 1;
  *scales = copy;
  return 0;
}

weave_result_t weave_lt_run_scaled(weave_lt_t *lt, float alpha, const void *A, const void *B, const float *scale_a,
                                   const float *scale_b, void *C, weave_stream_t stream) {
  float beta = 0.f;
  if (lt->scale_mode != WEAVE_SCALE_NONE && scale_a && scale_b) {
    const int row = lt->scale_mode == WEAVE_SCALE_ROW;
    if (lt_aligned_scales(row ? (size_t)lt->N : 1, lt->scale_copy, &scale_b, stream) ||
        lt_aligned_scales(row ? (size_t)lt->M : 1, lt->scale_copy + lt->copy_b_floats, &scale_a, stream))
      return WEAVE_ERROR_CUDA;
  }
  if (lt->scale_mode != WEAVE_SCALE_NONE) {
    /* per call: the pointers may change without a new plan (swapped: cuBLASLt's A is our B) */
    if (!scale_a || !scale_b ||
        cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_b, sizeof(scale_b)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(lt->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_a, sizeof(scale_a)) !=
            CUBLAS_STATUS_SUCCESS)
      return WEAVE_ERROR_CUDA;
  }
  const cublasLtMatmulAlgo_t *algo = lt_algo_for(lt, A, B, C);
  if (!algo) return WEAVE_ERROR_UNSUPPORTED;
  cublasStatus_t st = cublasLtMatmul(lt->handle, lt->desc, &alpha, B, lt->la, A, lt->lb, &beta, C, lt->lc, C, lt->lc,
                                     algo, lt->workspace, lt->workspace_bytes, (cudaStream_t)stream);
  return st == CUBLAS_STATUS_SUCCESS ? WEAVE_SUCCESS : WEAVE_ERROR_CUDA;
}

void weave_lt_describe(const weave_lt_t *lt, char *buf, size_t len) {
  static const cublasLtMatmulAlgoConfigAttributes_t what[] = {CUBLASLT_ALGO_CONFIG_ID,
                                                              CUBLASLT_ALGO_CONFIG_TILE_ID,
                                                              CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                                              CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                                              CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
                                                              CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                              CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME};
  static const char *name[] = {"algo", "tile", "stages", "cluster", "swizzle", "splitk", "reduction"};
  static const size_t bytes[] = {4, 4, 4, 2, 4, 4, 4}; /* the cluster shape is a uint16_t */
  size_t at = 0;
  if (!buf || len == 0) return;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof(what) / sizeof(what[0]) && at < len; ++i) {
    uint32_t v = 0; /* little-endian: a 2-byte value lands in the low half; a failed query prints -1 */
    size_t got = 0;
    const int ok =
        cublasLtMatmulAlgoConfigGetAttribute(&lt->algo, what[i], &v, bytes[i], &got) == CUBLAS_STATUS_SUCCESS;
    at += (size_t)snprintf(buf + at, len - at, "%s%s %lld", i ? " " : "", name[i], ok ? (long long)v : -1ll);
  }
}
