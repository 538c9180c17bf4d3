/*
 * tests/blas_main.c: every test executable that links the runtime starts
 * here (linked with -Wl,--wrap=main, tests/CMakeLists.txt), so it runs the
 * OpenBLAS kernels of this CPU as the kdc binary does: a DYNAMIC_ARCH
 * OpenBLAS that does not know the CPU falls back to its oldest kernels
 * (runtime/blas_core.c), whose GEMMs round and take paths (small-matrix
 * kernels, blocking) unlike the ones users get.
 */
#include "runtime/runtime.h"

int __real_main(int argc, char **argv);
int __wrap_main(int argc, char **argv);

int __wrap_main(int argc, char **argv) {
  kdc_rt_blas_select_core(argv); /* may execute the test again, same pid */
  return __real_main(argc, argv);
}
