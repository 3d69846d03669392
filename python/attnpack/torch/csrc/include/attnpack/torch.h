/* libattnpack_torch: PyTorch's SDPA flash/efficient ops served by attnpack's kernels.
 *
 * The C entry points of the PyTorch extension. A program that links libtorch and this library
 * (no Python) calls attnpack_torch_enable() once; from then on at::scaled_dot_product_attention
 * (and the four aten ops behind it) runs forward and backward on the bundle where it can, and on
 * PyTorch's own kernels, with PyTorch's own errors, everywhere else. The Python package
 * (attnpack.torch) calls the same library through ctypes.
 *
 *   find_package(attnpack_torch CONFIG REQUIRED)     # the target attnpack::torch
 *   target_link_libraries(app PRIVATE attnpack::torch ${TORCH_LIBRARIES})
 *
 * Every function that can fail returns 0 on success, else non-zero with the reason written
 * (NUL-terminated, truncated to `capacity`) into `error`. Text results are JSON written into
 * `buffer`; they return the full length, so a call with a larger buffer gets the rest.
 * docs/torch.md, "From C++", has the recipe.
 */
#ifndef ATTNPACK_TORCH_H
#define ATTNPACK_TORCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What attnpack.torch.enable() does: overrides the CUDA kernels of the SDPA flash and efficient
 * ops (PyTorch's own are captured first, for every call the bundle does not serve) and, where
 * PyTorch put cuDNN first, moves flash and efficient ahead of it in the SDPA priority order.
 * `bundle_directory`: the folder of attnpack-<version>-<arch>.apk; NULL or "" lets the runtime
 * choose ($ATTNPACK_BUNDLE_DIR, else <dir of libattnpack.so>/attnpack). Enabling twice is one. */
int attnpack_torch_enable(const char* bundle_directory, char* error, size_t capacity);

/* Undoes attnpack_torch_enable(): PyTorch's kernels and priority order as they were (an order
 * someone else set meanwhile is left alone). A no-op when not enabled. */
int attnpack_torch_disable(char* error, size_t capacity);

/* 1 while the overrides are registered (by enable or by the Python package), else 0. */
int attnpack_torch_is_active(void);

/* {"calls": {kernel: n}, "fallbacks": {reason: n}, "devices": {...}, "ops": {...},
 *  "deterministic_backward": n}: which kernel served how many calls, and why others fell back. */
size_t attnpack_torch_stats(char* buffer, size_t capacity);
void attnpack_torch_reset_stats(void);

/* Like ATTNPACK_LOG=1: print each new decision once to stderr. */
void attnpack_torch_set_logging(int on);

/* Loads every kernel of the archive of CUDA device `device` now (before CUDA-graph capture). */
int attnpack_torch_preload(int64_t device, char* error, size_t capacity);

/* The torch version this library was compiled against ("2.13.0"); it must match the running one. */
const char* attnpack_torch_built_with(void);

#ifdef __cplusplus
}
#endif

#endif /* ATTNPACK_TORCH_H */
