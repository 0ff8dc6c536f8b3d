/* Build guard (CMakeLists.txt): this directory comes first on the include path of weave's host core
 * (weave_core: runtime, plan model, tune, trace), which must build and run without a CUDA toolkit. */
#error \
    "weave_core must not include <cuda_runtime.h>, directly or through another header: move the CUDA-dependent part out of the host core"
