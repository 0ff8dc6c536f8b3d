/* Standalone `weave-bench-gemm`: the `--op gemm` part of weave-bench on its own. */
int weave_bench_gemm_main(int argc, char **argv);

int main(int argc, char **argv) { return weave_bench_gemm_main(argc, argv); }
