/* Configure-time self-test of the build guard: compiling this with the host core's include path must fail. */
#include <cuda_runtime_api.h>
int main(void) { return 0; }
