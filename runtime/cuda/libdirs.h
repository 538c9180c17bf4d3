/*
 * runtime/cuda/libdirs.h: where kdc looks for cuBLAS and NCCL when the
 * loader's own search (LD_LIBRARY_PATH, ld.so.cache) finds nothing
 * (docs/gpu.md, "Bundle": how the bundle finds the CUDA libraries).
 * Built in every build: it touches no CUDA header.
 */
#ifndef KDC_RUNTIME_CUDA_LIBDIRS_H
#define KDC_RUNTIME_CUDA_LIBDIRS_H

#include <stddef.h>

/* The directories to try, in order, that exist on this machine:
 *   1. |toolkit| (the build's toolkit lib64; may be NULL), then
 *      /usr/local/cuda/lib64 and /usr/local/cuda-* /targets/x86_64-linux/lib;
 *   2. the library folders of NVIDIA's pip wheels (nvidia-cublas,
 *      nvidia-nccl-cu13, ...: site-packages/nvidia/NAME/lib) in the Python
 *      environments a user most likely has: $VIRTUAL_ENV, $CONDA_PREFIX,
 *      the prefix of every $PATH entry (DIR/../lib/python3* /{site,dist}-
 *      packages: a venv's bin, pyenv's versions, /usr/local/bin), and
 *      ~/.local.
 * Globs only (no Python is run).  Returns the count; *|out| is a malloc'd
 * array of malloc'd strings without duplicates (free with
 * rt_cuda_lib_dirs_free). */
size_t rt_cuda_lib_dirs(const char *toolkit, char ***out);
void rt_cuda_lib_dirs_free(char **dirs, size_t n);

#endif
