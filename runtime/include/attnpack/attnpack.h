/*
 * libattnpack: the thin runtime of the attnpack attention bundle.
 *
 * It opens one archive (docs/ARCHIVE.md) per GPU arch, selects a kernel for an SDPA problem,
 * loads that kernel's image lazily through the CUDA driver or HIP (reached with dlopen, so the
 * library builds and loads with no GPU and no toolkit), and launches it from the launch spec
 * the archive holds. docs/runtime.md is the user guide.
 *
 * Conventions:
 * - Every call returns an attnpack_status. On failure, attnpack_last_error() holds a message
 *   that names the file, key or tensor and the fix. ATTNPACK_STATUS_UNSUPPORTED means "this
 *   problem is not served, fall back"; its message is the bare reason ("head_dim 80 not built").
 * - Parameter structs start with `struct_size`: set it to sizeof(the struct) as you compiled
 *   it. Newer fields are appended at the end, so an older caller keeps working; fields the
 *   caller's struct does not have read as zero.
 * - String outputs: (buffer, capacity, length). The text is NUL-terminated and truncated to
 *   capacity-1 bytes; *length receives its full length. Pass capacity 0 to ask for the length.
 * - Nothing here aborts the process or lets a C++ exception escape.
 */
#ifndef ATTNPACK_ATTNPACK_H
#define ATTNPACK_ATTNPACK_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define ATTNPACK_API __declspec(dllexport)
#else
#define ATTNPACK_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNPACK_VERSION_MAJOR 0
#define ATTNPACK_VERSION_MINOR 1
#define ATTNPACK_VERSION_PATCH 0
/* The archive format major this runtime reads (any minor of it). */
#define ATTNPACK_ARCHIVE_FORMAT_MAJOR 3

typedef enum attnpack_status {
  ATTNPACK_STATUS_OK = 0,
  ATTNPACK_STATUS_UNSUPPORTED = 1,       /* the problem is not served; fall back. Message: reason */
  ATTNPACK_STATUS_INVALID_ARGUMENT = 2,  /* null handle or pointer, bad struct_size/enum, workspace */
  ATTNPACK_STATUS_ARCHIVE_NOT_FOUND = 3, /* no archive file, or several, or it cannot be read */
  ATTNPACK_STATUS_ARCHIVE_CORRUPT = 4,   /* bad magic, truncated, sha256 mismatch, malformed index */
  ATTNPACK_STATUS_ARCHIVE_VERSION = 5,   /* an archive format major this runtime does not read */
  ATTNPACK_STATUS_ARCH_MISMATCH = 6,     /* the archive targets another arch than the device */
  ATTNPACK_STATUS_BAD_LAUNCH_SPEC = 7,   /* a kernel's launch spec disagrees with this runtime */
  ATTNPACK_STATUS_NO_DRIVER = 8,         /* libcuda.so.1 / libamdhip64.so could not be loaded */
  ATTNPACK_STATUS_NO_DEVICE = 9,         /* a driver, but no usable device */
  ATTNPACK_STATUS_DRIVER_ERROR = 10,     /* a driver call failed; the message has its error */
  ATTNPACK_STATUS_INTERNAL = 11          /* out of memory, or a bug in attnpack */
} attnpack_status;

typedef enum attnpack_op { ATTNPACK_OP_FWD = 1, ATTNPACK_OP_BWD = 2 } attnpack_op;

typedef enum attnpack_dtype {
  ATTNPACK_DTYPE_FP16 = 1,
  ATTNPACK_DTYPE_BF16 = 2,
  ATTNPACK_DTYPE_FP32 = 3 /* never built today; selecting it reports "dtype fp32 not built" */
} attnpack_dtype;

/* An opened archive plus its per-device caches and counters. Thread-safe. */
typedef struct attnpack_bundle attnpack_bundle;

/* ---- versions and errors ---------------------------------------------------------------- */

/* ATTNPACK_VERSION_MAJOR * 10000 + MINOR * 100 + PATCH of the loaded library. */
ATTNPACK_API uint32_t attnpack_version(void);
ATTNPACK_API const char* attnpack_version_string(void);
/* "ok", "unsupported", "invalid_argument", ... */
ATTNPACK_API const char* attnpack_status_name(attnpack_status status);
/* The message of this thread's last failed call ("" if none). Valid until this thread's next
 * failing call. */
ATTNPACK_API const char* attnpack_last_error(void);

/* ---- opening a bundle ------------------------------------------------------------------- */

/* Launches are recorded, never run: no driver is touched (tests of launch argument building;
 * see attnpack_recorded_launches). The device it pretends to be has 132 SMs, or
 * $ATTNPACK_RECORDING_NUM_SMS (1..100000, read at open) for kernels that require a count, and
 * is named $ATTNPACK_RECORDING_GPU_NAME (read at open; unset: no name), which selects the
 * tuning entries the archive has for the GPU of that name (format 2.7, `by_gpu`). */
#define ATTNPACK_OPEN_RECORDING_DRIVER 0x1u

typedef struct attnpack_open_params {
  uint32_t struct_size;
  uint32_t flags;        /* ATTNPACK_OPEN_* */
  const char* path;      /* one archive file; NULL: look in `directory` */
  const char* directory; /* NULL: $ATTNPACK_BUNDLE_DIR, else <dir of libattnpack.so>/attnpack */
  const char* arch;      /* expected arch ("sm_90"); NULL: the current device's arch */
} attnpack_open_params;

/* Opens (mmap) and verifies the preamble, meta and index of one archive. Images are inflated
 * and checked only when a kernel first needs them. When `arch` is NULL the current device is
 * asked for its arch (CUDA, then HIP), and a mismatch is ATTNPACK_STATUS_ARCH_MISMATCH. */
ATTNPACK_API attnpack_status attnpack_open(const attnpack_open_params* params,
                                           attnpack_bundle** bundle);
/* Unloads its modules and frees it; no other call on it may be in flight. NULL is fine. */
ATTNPACK_API void attnpack_close(attnpack_bundle* bundle);

typedef struct attnpack_bundle_info {
  uint32_t struct_size;
  uint16_t format_major, format_minor;
  uint32_t num_kernels, num_images;
  const char* path;           /* strings live until attnpack_close */
  const char* arch;
  const char* bundle_version;
  const char* compilers;      /* "triton=3.6.0" (comma separated, sorted) */
  const char* driver;         /* "cuda", "hip" or "recording" */
  /* Version 2, filled when struct_size covers it: the GPU the archive's tuning database was
   * measured on ("NVIDIA H200"; "mixed: ..." when its entries came from several; "" when the
   * database is untuned or says nothing). Another GPU of the arch runs the same kernels, but
   * the tuned choices are that GPU's (docs/tuning.md, "Entries of another GPU"). */
  const char* tuned_on;
  /* Version 3: the GPU models with tuning entries of their own (the database's by_gpu lists,
   * sorted by name), `num_gpu_models` of them: gpu_models[i] has gpu_entries[i] entries, which
   * serve first on a device whose driver reports exactly that name. 0 and NULLs when none. */
  uint32_t num_gpu_models;
  const char* const* gpu_models;
  const uint32_t* gpu_entries;
} attnpack_bundle_info;

ATTNPACK_API attnpack_status attnpack_bundle_info_get(const attnpack_bundle* bundle,
                                                      attnpack_bundle_info* info);

/* Inflates every image and checks its sha256, with no driver (what a first load checks). */
ATTNPACK_API attnpack_status attnpack_verify_images(attnpack_bundle* bundle);

/* Everything the runtime can check with no driver: every kernel's launch spec is one this
 * runtime can launch (ATTNPACK_STATUS_BAD_LAUNCH_SPEC naming the first kernel that is not, and
 * why; open() keeps such kernels out of selection instead of refusing the archive), then every
 * image as attnpack_verify_images. */
ATTNPACK_API attnpack_status attnpack_verify(attnpack_bundle* bundle);

/* The raw (inflated, sha256-checked) image that step `step` of kernel `kernel` runs: exactly
 * the bytes a first load hands to the driver. Copies up to `capacity` bytes; *size receives
 * the image size. */
ATTNPACK_API attnpack_status attnpack_kernel_image(attnpack_bundle* bundle, const char* kernel,
                                                   uint32_t step, void* buffer, size_t capacity,
                                                   size_t* size);

/* ---- problems --------------------------------------------------------------------------- */

/* One tensor as a logical [B, H, S, D] view; strides in elements. */
typedef struct attnpack_tensor {
  void* data; /* device address; may be NULL for select/explain/workspace_size */
  int64_t stride_b, stride_h, stride_s, stride_d;
} attnpack_tensor;

/* One SDPA call. Shapes: q, o, dout, dq are [B, Hq, Sq, D]; k, v, dk, dv are [B, Hkv, Sk, D];
 * lse is float32, contiguous [B, Hq, Sq], natural log. */
typedef struct attnpack_problem {
  uint32_t struct_size;
  int32_t op;            /* attnpack_op */
  int32_t dtype;         /* attnpack_dtype of q k v o dout dq dk dv */
  int32_t causal;        /* nonzero: top-left aligned mask (F.sdpa's is_causal) */
  int32_t batch;         /* B */
  int32_t heads_q;       /* Hq */
  int32_t heads_kv;      /* Hkv; Hq must be a multiple (GQA) */
  int32_t seqlen_q;      /* Sq */
  int32_t seqlen_k;      /* Sk */
  int32_t head_dim;      /* D */
  float softmax_scale;   /* 0 or NaN: 1/sqrt(D) */
  attnpack_tensor q, k, v, o;
  void* lse;
  attnpack_tensor dout, dq, dk, dv; /* backward only */
  /* Version 2. NULL: select as usual (tuned entry, else the functional key's default).
   * A kernel name ("toy/fwd/fp16-d32-full/BLOCK32_warps2"): use exactly that kernel, for
   * `attnpack tune`. A name the archive lacks is ATTNPACK_STATUS_INVALID_ARGUMENT; a kernel
   * for another op or functional key, or whose layout checks fail, is UNSUPPORTED. */
  const char* kernel;
  /* Version 3. ATTNPACK_PROBLEM_* bits; 0: none. */
  uint32_t flags;
} attnpack_problem;

/* Select only kernels whose family declares them deterministic (bitwise-equal outputs for equal
 * inputs), as torch.use_deterministic_algorithms(True) asks: a tuning entry whose winner is
 * not deterministic serves its `deterministic_kernel` (the fastest deterministic candidate
 * measured for that key) instead; with none, the functional key's default serves if it is
 * deterministic, else the problem is UNSUPPORTED. Forwards are always deterministic. */
#define ATTNPACK_PROBLEM_DETERMINISTIC 0x1u

typedef struct attnpack_kernel_info {
  uint32_t struct_size;
  uint32_t num_steps;
  const char* name;   /* "triton/fwd/bf16-d128-causal/BM128_BN64_w8_s3"; lives until close */
  const char* family; /* "triton" */
  /* Version 2: the family's declared policy (docs/ARCHIVE.md, `families`), filled when
   * struct_size covers it. */
  int32_t deterministic; /* 1: bitwise-equal outputs for equal inputs (no atomics races) */
  uint32_t priority;     /* default-serving rank before tuning: the lowest serves a key */
  const char* backend;   /* "triton", "prebuilt", ...: how the family's images were made */
  const char* license;   /* "MIT", ... */
  const char* origin;    /* where the kernels come from */
} attnpack_kernel_info;

/* Which kernel serves `problem`: the one problem->kernel names, if set; else the archive's
 * tuned entry for the problem's bucketed key (docs/ARCHIVE.md, `tuning`), else the functional
 * key's default. ATTNPACK_STATUS_UNSUPPORTED (message: the reason) when none does. Pointers
 * in the problem may be NULL here; non-NULL ones are checked for alignment. A candidate's
 * requirements (docs/ARCHIVE.md, `requires`) are checked too; when one names the device's
 * multiprocessor count, this call (and explain, workspace_size, preload) asks the calling
 * thread's device, and without one the count is unknown and that requirement fails. */
ATTNPACK_API attnpack_status attnpack_select(attnpack_bundle* bundle,
                                             const attnpack_problem* problem,
                                             attnpack_kernel_info* kernel);

/* The same decision as text for people: the bucketed tuning key, the candidates, the chosen
 * kernel with its steps, grids and workspace and whether a tuned entry, the default or a
 * forced name served it, or the reason it is not served. Returns OK even when the
 * problem is unsupported (the text says so); other failures return their status. */
ATTNPACK_API attnpack_status attnpack_explain(attnpack_bundle* bundle,
                                              const attnpack_problem* problem, char* buffer,
                                              size_t capacity, size_t* length);

/* Bytes of workspace the caller must pass to run `problem`: the kernel's declared float32
 * buffers (each at a 256-byte aligned offset) then Triton's global/profile scratch when a step
 * needs it (per program, times the launch grid). 0 when nothing is needed. When a step's
 * scratch depends on a grid of `num_sms`, the current device is asked. */
ATTNPACK_API attnpack_status attnpack_workspace_size(attnpack_bundle* bundle,
                                                     const attnpack_problem* problem,
                                                     uint64_t* bytes);

/* ---- running ---------------------------------------------------------------------------- */

typedef struct attnpack_launch_params {
  uint32_t struct_size;
  void* stream;            /* CUstream / hipStream_t; NULL: the legacy default stream */
  void* workspace;         /* device memory, 256-byte aligned; NULL if workspace_size is 0 */
  uint64_t workspace_size; /* bytes available at `workspace` */
} attnpack_launch_params;

/* Loads (once per device context) every kernel the problems need, so nothing loads later,
 * e.g. during CUDA-graph capture. count == 0: every kernel the calling thread's device can
 * select: the selection table's, the arch-wide tuning entries' and (format 2.7) its own GPU
 * model's entries' (not another model's). Unsupported problems are skipped (they will fall
 * back, which needs no kernel). */
ATTNPACK_API attnpack_status attnpack_preload(attnpack_bundle* bundle,
                                              const attnpack_problem* problems, size_t count);

/* O and LSE from q, k, v. problem->op must be ATTNPACK_OP_FWD. Asynchronous on the stream. */
ATTNPACK_API attnpack_status attnpack_forward(attnpack_bundle* bundle,
                                              const attnpack_problem* problem,
                                              const attnpack_launch_params* launch);
/* dq, dk, dv from dout, q, k, v, o, lse. problem->op must be ATTNPACK_OP_BWD. The workspace
 * must hold attnpack_workspace_size() bytes. */
ATTNPACK_API attnpack_status attnpack_backward(attnpack_bundle* bundle,
                                               const attnpack_problem* problem,
                                               const attnpack_launch_params* launch);

/* ---- observing -------------------------------------------------------------------------- */

/* JSON: {"calls": {kernel: n}, "unsupported": {reason: n}, "modules_loaded": n}. */
ATTNPACK_API attnpack_status attnpack_stats(attnpack_bundle* bundle, char* buffer,
                                            size_t capacity, size_t* length);
ATTNPACK_API attnpack_status attnpack_stats_reset(attnpack_bundle* bundle);

/* A bundle opened with ATTNPACK_OPEN_RECORDING_DRIVER: its most recent launches (up to 256)
 * as JSON, oldest first: symbol, grid, block, cluster, shared, stream, the packed argument
 * bytes (hex) and each host tensor map's encode arguments. Clears the record. */
ATTNPACK_API attnpack_status attnpack_recorded_launches(attnpack_bundle* bundle, char* buffer,
                                                        size_t capacity, size_t* length);

/* A bundle opened with ATTNPACK_OPEN_RECORDING_DRIVER: from now on the calling thread's
 * pretend device is `device` (0 until set), as cudaSetDevice would make it, for every recording
 * bundle. Each pretend device is its own context: images load once per device, and each
 * recorded launch names its device and the function it used (multi-GPU tests without GPUs).
 * Other bundles, or a negative device: ATTNPACK_STATUS_INVALID_ARGUMENT. */
ATTNPACK_API attnpack_status attnpack_recording_set_device(attnpack_bundle* bundle, int32_t device);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNPACK_ATTNPACK_H */
