/* Lockstep of ranks sharing a GPU (lockstep.h). */
#include "plan/lockstep.h"

#include <cuda_runtime_api.h>

#include "kernels/kernels.h" /* weave_cuda_error_string */
#include "runtime/internal.h"

weave_result_t weave_lockstep_create(weave_team_t team, void **event) {
  *event = NULL;
  if (team->world < 2 || team->info.ranks_on_device < 2) return WEAVE_SUCCESS;
  cudaEvent_t ev;
  const int e = (int)cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e) return weave_fail(team, WEAVE_ERROR_CUDA, "plan: creating the lockstep event: %s", weave_cuda_error_string(e));
  *event = ev;
  return WEAVE_SUCCESS;
}

void weave_lockstep_destroy(void *event) {
  if (event) cudaEventDestroy((cudaEvent_t)event);
}

weave_result_t weave_lockstep_wait(weave_team_t team, void *event, const char *fn, weave_stream_t stream) {
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (!event) return WEAVE_SUCCESS;
  int e = (int)cudaStreamIsCapturing((cudaStream_t)stream, &cap);
  if (!e && cap != cudaStreamCaptureStatusNone) return WEAVE_SUCCESS;
  if (!e) e = (int)cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream);
  if (!e) e = (int)cudaEventSynchronize((cudaEvent_t)event);
  return e ? weave_fail(team, WEAVE_ERROR_CUDA, "%s: waiting for the call (ranks sharing a GPU): %s", fn,
                        weave_cuda_error_string(e))
           : WEAVE_SUCCESS;
}
