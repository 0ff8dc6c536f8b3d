/* Build guard (CMakeLists.txt): weave loads libnccl.so.2 at run time and declares the little of NCCL's
 * ABI it calls in src/plan/nccl_rt.c, so a standard CUDA install (which has no nccl.h) builds it. */
#error "weave must not include <nccl.h>: a standard CUDA install does not have it (see src/plan/nccl_rt.c)"
