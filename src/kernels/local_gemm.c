/* weave_gemm: the local GEMM on its own (world = 1, and the GEMM of the bulk strategy). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "gemm/hopper/gemm_hopper.h"
#include "runtime/internal.h"
#include "kernels/kernels.h"
#include "common/dtype.h"
#include "runtime/arg_checks.h"

/* Stream-K workspaces of the Hopper GEMM (tile_scheduler.h), one per (device, stream): calls on one
 * stream run one after the other, so they can share one; calls on two streams must not. Allocated
 * (and its counters zeroed on the stream) the first time a call on that stream plans a stream-K
 * tail, kept until the process ends (weave_hgemm_workspace_max bytes: ~33 MiB on 132 SMs).
 * Not while the stream is being captured (allocation is not capturable): such calls run
 * data-parallel unless the stream already has a workspace. Table full or allocation failed: the
 * same, data-parallel (correct, only the tail is slower). */
#define WEAVE_GEMM_WS_SLOTS 32
static struct {
  int dev;
  weave_stream_t stream;
  void *ws;
  size_t bytes;
} g_gemm_ws[WEAVE_GEMM_WS_SLOTS];
static int g_gemm_ws_used = 0;
static pthread_mutex_t g_gemm_ws_lock = PTHREAD_MUTEX_INITIALIZER;

static void *gemm_workspace(int dev, weave_stream_t stream, size_t need, size_t *bytes) {
  void *ws = NULL;
  *bytes = 0;
  pthread_mutex_lock(&g_gemm_ws_lock);
  for (int i = 0; i < g_gemm_ws_used; ++i)
    if (g_gemm_ws[i].dev == dev && g_gemm_ws[i].stream == stream) {
      ws = g_gemm_ws[i].ws;
      *bytes = g_gemm_ws[i].bytes;
      break;
    }
  if (!ws && g_gemm_ws_used < WEAVE_GEMM_WS_SLOTS) {
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    size_t want = weave_hgemm_workspace_max(0);
    if (want < need) want = need;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &cap) == cudaSuccess && cap == cudaStreamCaptureStatusNone &&
        cudaMalloc(&ws, want) == cudaSuccess) {
      if (cudaMemsetAsync(ws, 0, WEAVE_HGEMM_SK_SLOTS_OFFSET, (cudaStream_t)stream) == cudaSuccess) {
        g_gemm_ws[g_gemm_ws_used].dev = dev;
        g_gemm_ws[g_gemm_ws_used].stream = stream;
        g_gemm_ws[g_gemm_ws_used].ws = ws;
        g_gemm_ws[g_gemm_ws_used].bytes = want;
        g_gemm_ws_used++;
        *bytes = want;
      } else {
        cudaFree(ws);
        ws = NULL;
      }
    }
    cudaGetLastError(); /* a failed allocation is not the caller's error: data-parallel */
  }
  pthread_mutex_unlock(&g_gemm_ws_lock);
  return ws;
}

/* The Hopper GEMM's arguments for a call (default schedule and stream-K; no workspace yet): what
 * dispatch launches and what workspace_need plans, alike. */
static weave_hgemm_args_t hgemm_args(const weave_gemm_call_t *c) {
  const int fp8 = weave_dtype_is_fp8(c->dtype);
  const weave_hgemm_args_t a = {c->M,
                                c->N,
                                c->K,
                                c->dtype,
                                c->b_layout,
                                c->alpha,
                                c->A,
                                c->B,
                                c->bias,
                                c->C,
                                c->num_blocks,
                                NULL,
                                0,
                                WEAVE_HGEMM_SK_AUTO,
                                WEAVE_HGEMM_SCHED_AUTO,
                                c->out_dtype,
                                fp8 ? c->scales : (weave_hgemm_scales_t){WEAVE_SCALE_NONE, NULL, NULL},
                                fp8 && c->fp8_fast_accum,
                                0 /* tile_n: the plan's */};
  return a;
}

/* The local GEMM on the fastest role the arguments allow: TMA + wgmma for 16-bit inputs with
 * 16-byte aligned rows and an output of the input dtype, and for fp8 (its only role), else
 * mma.sync / SIMT. */
weave_result_t weave_gemm_dispatch(const weave_gemm_call_t *c, weave_stream_t stream, char *msg, size_t msglen) {
  const int M = c->M, N = c->N, K = c->K;
  size_t e = weave_dtype_size(c->dtype);
  size_t rowb_b = (c->b_layout == WEAVE_LAYOUT_ROW ? (size_t)N : (size_t)K) * e;
  int vec_ok =
      ((uintptr_t)c->A % 16 == 0) && ((uintptr_t)c->B % 16 == 0) && ((size_t)K * e) % 16 == 0 && rowb_b % 16 == 0;
  const int fp8 = weave_dtype_is_fp8(c->dtype);
  if (fp8 || (vec_ok && c->out_dtype == c->dtype && weave_kernel_hopper_ok(c->dtype, c->b_layout, N, K))) {
    weave_hgemm_args_t a = hgemm_args(c);
    const size_t need = weave_hgemm_workspace_size(&a);
    if (need && c->ws) {
      a.workspace = c->ws;
      a.workspace_bytes = c->ws_bytes;
    } else if (need) {
      int dev = 0;
      if (cudaGetDevice(&dev) == cudaSuccess) a.workspace = gemm_workspace(dev, stream, need, &a.workspace_bytes);
      cudaGetLastError();
    }
    return (weave_result_t)weave_hgemm_launch(&a, (cudaStream_t)stream, msg, msglen);
  }
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  int per_sm = weave_kernel_blocks_per_sm(c->dtype, 0, 0, NULL);
  int num_blocks = c->num_blocks;
  if (num_blocks <= 0 || num_blocks > per_sm * sms) num_blocks = per_sm * sms;
  int err = weave_launch_gemm(M, N, K, c->dtype, c->b_layout, c->alpha, c->A, c->B, c->bias, c->C, c->out_dtype,
                              num_blocks, vec_ok, stream);
  if (err) {
    snprintf(msg, msglen, "GEMM launch: %s", weave_cuda_error_string(err));
    return WEAVE_ERROR_CUDA;
  }
  return WEAVE_SUCCESS;
}

size_t weave_gemm_workspace_need(const weave_gemm_call_t *c) {
  const int fp8 = weave_dtype_is_fp8(c->dtype);
  if (!fp8 && (c->out_dtype != c->dtype || !weave_kernel_hopper_ok(c->dtype, c->b_layout, c->N, c->K))) return 0;
  const weave_hgemm_args_t a = hgemm_args(c);
  return weave_hgemm_workspace_size(&a);
}

void *weave_gemm_workspace_alloc(weave_team_t team, const weave_gemm_call_t *c, size_t *bytes) {
  *bytes = 0;
  const size_t need = weave_gemm_workspace_need(c);
  void *ws = NULL;
  if (!need) return NULL;
  if (cudaMalloc(&ws, need) != cudaSuccess || cudaMemset(ws, 0, need) != cudaSuccess) {
    cudaGetLastError();
    cudaFree(ws);
    weave_log(WEAVE_LOG_WARN, team, "plan: no device memory for the GEMM's stream-K workspace: whole tiles only");
    return NULL;
  }
  *bytes = need;
  return ws;
}

static int device_reads(int pageable, const void *ptr) {
  if (pageable) return 1;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.type != cudaMemoryTypeUnregistered;
}

int weave_device_reads(int device, const void *ptr) { return device_reads(weave_pageable_access(device), ptr); }

weave_result_t weave_check_device_reads(weave_team_t team, const char *fn, int device, const void *const *ptrs,
                                        const char *const *names, int n) {
  const int pageable = weave_pageable_access(device);
  for (int i = 0; i < n; ++i)
    if (ptrs[i] && !device_reads(pageable, ptrs[i]))
      return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                        "%s: %s %p is host memory this GPU cannot read (pass device memory)", fn, names[i], ptrs[i]);
  return WEAVE_SUCCESS;
}

weave_result_t weave_gemm(int M, int N, int K, weave_dtype_t dtype, weave_layout_t b_layout, float alpha, const void *A,
                          const void *B, const void *bias, void *C, int num_blocks, weave_stream_t stream) {
  WEAVE_CHECK(weave_check_gemm_shape(NULL, "weave_gemm", M, N, K, "K"));
  if (weave_dtype_is_fp8(dtype))
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT,
                      "weave_gemm: dtype %d (fp8) takes scales and an output type: use weave_gemm_ex", (int)dtype);
  if ((unsigned)dtype > WEAVE_FP32 || (unsigned)b_layout > WEAVE_LAYOUT_COL)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm: dtype %d / b_layout %d unknown", (int)dtype,
                      (int)b_layout);
  if (!A || !B || !C) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm: A, B and C must be non-NULL");
  if (!isfinite(alpha)) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm: alpha is not finite");
  if (num_blocks < 0)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm: num_blocks %d < 0", num_blocks);
  size_t e = dtype == WEAVE_FP32 ? 4 : 2;
  if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C | (uintptr_t)bias) % e)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm: pointers must be %zu-byte aligned", e);
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return weave_fail(NULL, WEAVE_ERROR_NO_DEVICE, "weave_gemm: no CUDA device");
  }
  {
    const void *ptrs[4] = {A, B, bias, C};
    static const char *const names[4] = {"A", "B", "bias", "C"};
    WEAVE_CHECK(weave_check_device_reads(NULL, "weave_gemm", dev, ptrs, names, 4));
  }
  char msg[256] = "";
  const weave_gemm_call_t call = {.M = M,
                                  .N = N,
                                  .K = K,
                                  .dtype = dtype,
                                  .b_layout = b_layout,
                                  .out_dtype = dtype,
                                  .alpha = alpha,
                                  .A = A,
                                  .B = B,
                                  .bias = bias,
                                  .C = C,
                                  .num_blocks = num_blocks};
  weave_result_t rc = weave_gemm_dispatch(&call, stream, msg, sizeof(msg));
  if (rc != WEAVE_SUCCESS) return weave_fail(NULL, rc, "weave_gemm: %s", msg);
  return WEAVE_SUCCESS;
}

weave_result_t weave_gemm_ex(const weave_gemm_args_t *a, weave_stream_t stream) {
  const char *fn = "weave_gemm_ex";
  if (!a) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: args is NULL", fn);
  if (a->struct_size != sizeof(weave_gemm_args_t))
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: args.struct_size %zu != %zu (use WEAVE_GEMM_ARGS_INIT)",
                      fn, a->struct_size, sizeof(weave_gemm_args_t));
  const int M = a->M, N = a->N, K = a->K;
  WEAVE_CHECK(weave_check_gemm_shape(NULL, fn, M, N, K, "K"));
  if ((unsigned)a->dtype > WEAVE_FP8_E4M3 || (unsigned)a->b_layout > WEAVE_LAYOUT_COL)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: dtype %d / b_layout %d unknown", fn, (int)a->dtype,
                      (int)a->b_layout);
  WEAVE_CHECK(weave_check_fp8_args(NULL, fn, a->dtype, a->out_dtype, a->b_layout, a->scale_mode, a->fp8_accum, K, "K"));
  if (!a->A || !a->B || !a->C)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: A, B and C must be non-NULL", fn);
  if (!isfinite(a->alpha)) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: alpha is not finite", fn);
  if (a->num_blocks < 0)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: num_blocks %d < 0", fn, a->num_blocks);
  const weave_dtype_t out = weave_dtype_out(a->dtype, a->out_dtype);
  const size_t ein = weave_dtype_size(a->dtype), eout = weave_dtype_size(out);
  if (((uintptr_t)a->A | (uintptr_t)a->B) % ein || ((uintptr_t)a->C | (uintptr_t)a->bias) % eout)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: A, B must be %zu-byte and C, bias %zu-byte aligned", fn,
                      ein, eout);
  const int fp8 = weave_dtype_is_fp8(a->dtype);
  if (fp8 && (((uintptr_t)a->A | (uintptr_t)a->B) & 15))
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: fp8 needs 16-byte aligned A and B (TMA); got %p, %p", fn,
                      a->A, a->B);
  const int scaled = a->scale_mode != WEAVE_SCALE_NONE;
  if (scaled && (!a->scale_a || !a->scale_b || ((uintptr_t)a->scale_a & 3) || ((uintptr_t)a->scale_b & 3)))
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: scale_mode %d needs 4-byte aligned device pointers scale_a and scale_b (got %p, %p)", fn,
                      (int)a->scale_mode, (const void *)a->scale_a, (const void *)a->scale_b);
  if (!scaled && (a->scale_a || a->scale_b))
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: scale_a / scale_b given with scale_mode NONE", fn);
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return weave_fail(NULL, WEAVE_ERROR_NO_DEVICE, "%s: no CUDA device", fn);
  }
  {
    const void *ptrs[6] = {a->A, a->B, a->bias, a->C, a->scale_a, a->scale_b};
    static const char *const names[6] = {"A", "B", "bias", "C", "scale_a", "scale_b"};
    WEAVE_CHECK(weave_check_device_reads(NULL, fn, dev, ptrs, names, 6));
  }
  const weave_gemm_call_t call = {.M = M,
                                  .N = N,
                                  .K = K,
                                  .dtype = a->dtype,
                                  .b_layout = a->b_layout,
                                  .out_dtype = out,
                                  .alpha = a->alpha,
                                  .A = a->A,
                                  .B = a->B,
                                  .bias = a->bias,
                                  .C = a->C,
                                  .scales = {(int)a->scale_mode, a->scale_a, a->scale_b},
                                  .fp8_fast_accum = a->fp8_accum == WEAVE_FP8_ACCUM_FAST,
                                  .num_blocks = a->num_blocks};
  char msg[256] = "";
  weave_result_t rc = weave_gemm_dispatch(&call, stream, msg, sizeof(msg));
  if (rc != WEAVE_SUCCESS) return weave_fail(NULL, rc, "%s: %s", fn, msg);
  return WEAVE_SUCCESS;
}
