// libattnpack_torch: PyTorch's SDPA flash/efficient ops served by libattnpack.
//
// The CUDA kernels of four aten ops are overridden (overrides.cpp); autograd, meta/fake and
// autocast stay PyTorch's. Each call is decided here (decide.cpp): a kernel of the bundle for
// the tensors' device serves it, or PyTorch's own kernel, captured before the override, does,
// and the reason is counted.
//
// No CUDA header is included anywhere: the current stream, device guards and allocations go
// through c10's device-generic interfaces, so the same source builds against a CPU-only torch
// (CI) and a CUDA torch (the GPU machine), and only the CUDA build ever runs a kernel.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>

#include "attnpack/attnpack.h"

namespace attnpack_torch {

// The overridden ops, one word each for stats and logs.
enum class Entry : uint8_t { FlashForward, FlashBackward, EfficientForward, EfficientBackward };
constexpr int kNumEntries = 4;
const char* entry_word(Entry entry);      // "flash_fwd", "flash_bwd", "efficient_fwd", "efficient_bwd"
const char* entry_op_name(Entry entry);   // "aten::_scaled_dot_product_flash_attention", ...
inline bool is_backward(Entry e) { return e == Entry::FlashBackward || e == Entry::EfficientBackward; }
inline bool is_flash(Entry e) { return e == Entry::FlashForward || e == Entry::FlashBackward; }

// One SDPA call as an overridden op received it. Tensors are logical [B, H, S, D].
struct Call {
  Entry entry = Entry::FlashForward;
  const at::Tensor* query = nullptr;
  const at::Tensor* key = nullptr;
  const at::Tensor* value = nullptr;
  const at::Tensor* out = nullptr;        // backward only
  const at::Tensor* grad_out = nullptr;   // backward only
  const at::Tensor* logsumexp = nullptr;  // backward only
  double dropout_p = 0.0;
  bool is_causal = false;
  bool return_debug_mask = false;
  bool has_attn_bias = false;
  bool wants_bias_grad = false;  // efficient backward: grad_input_mask[3]
  bool packed_varlen = false;    // flash backward: cum_seq_q/cum_seq_k given
  std::optional<double> scale;
  bool deterministic = false;            // torch.are_deterministic_algorithms_enabled()
  bool deterministic_warn_only = false;  // ... with warn_only=True
};

// The verdict on one call: a kernel of `bundle` serves it, or PyTorch's own kernel does.
struct Decision {
  attnpack_bundle* bundle = nullptr;
  attnpack_problem problem{};      // q, k, v (dout, o, lse for backward) views filled in
  attnpack_kernel_info kernel{};   // name and family when served
  std::string fallback_reason;     // empty: served
  // Served by a backward that is not deterministic while deterministic mode only warns: the
  // caller warns as PyTorch's own kernels do (warn_nondeterministic).
  bool nondeterministic = false;
  bool served() const { return fallback_reason.empty(); }
};

// ---- deciding (decide.cpp) ------------------------------------------------------------------

// How decide() finds its bundle: the one of the tensors' CUDA device (the launch path, with the
// device guard already set), or a given one (explain; tensors may be meta, pointers stay NULL).
// `checked`: the caller already ran unservable_reason() (and then normalized its tensors).
Decision decide(const Call& call, attnpack_bundle* explain_bundle = nullptr, bool checked = false);

// The PyTorch-level reason a call is not served ("" if none): what no archive can change.
// Served calls are kept inside what PyTorch's own kernel of the op accepts, so that anything
// PyTorch rejects reaches PyTorch's kernel and fails there, with PyTorch's own error.
std::string unservable_reason(const Call& call);

// Whether the backward of `kernel` gives the same bits on every run (no atomics, fixed
// reduction order). Decides what deterministic mode does with a call the kernel would serve.
bool backward_is_deterministic(const attnpack_kernel_info& kernel);

// The warning a served non-deterministic backward gives under
// torch.use_deterministic_algorithms(True, warn_only=True), once (as PyTorch's kernels do).
void warn_nondeterministic(const Decision& decision);

// Fills a problem's tensor view; strides of size-1 dims become 0 (they are never stepped, and 0
// keeps every divisibility a kernel was compiled to assume).
attnpack_tensor tensor_view(const at::Tensor& t, bool with_pointer);

// "flash_fwd bf16 B=2 Hq=32 Hkv=8 Sq=128 Sk=128 D=128 causal on cuda:0"
std::string describe(const Call& call);

// A runtime failure other than UNSUPPORTED, as a fallback reason ("runtime driver_error"); the
// full message is warned once.
std::string runtime_failure(attnpack_status status, const char* call);

// ---- bundles, one per CUDA device ------------------------------------------------------------

// Folder searched for attnpack-<version>-<arch>.apk; "" lets the runtime choose
// ($ATTNPACK_BUNDLE_DIR, else <dir of libattnpack.so>/attnpack). Changing it forgets opened
// bundles (they are leaked, not closed: a kernel may still be running from them).
void set_bundle_directory(const std::string& directory);
// The bundle for CUDA device `index`, opened on first use while that device is current. On
// failure: nullptr, `*reason` says why, and one warning per device is issued.
attnpack_bundle* device_bundle(int64_t index, std::string* reason);
// An archive opened with the recording driver, for explain without a GPU (kept open).
attnpack_bundle* explain_bundle(const std::string& path, const std::string& arch, std::string* error);

// ---- SDPA routing for programs that enable from C++ (routing.cpp) ----------------------------

// Puts flash and efficient ahead of cuDNN in the SDPA priority order where PyTorch put cuDNN
// first (attnpack/torch/_routing.py does the same for the Python package); undo_routing()
// restores the order unless someone changed it since.
void route_sdpa_to_flash();
void undo_routing();

// ---- observing ---------------------------------------------------------------------------------

void record_served(const Call& call, const Decision& decision);
void record_fallback(const Call& call, const std::string& reason);
std::string stats_json();
void reset_stats();
void set_logging(bool on);
bool logging();

// The current stream of `device` as the driver's handle (cudaStream_t), through c10.
void* current_stream(const c10::Device& device);

// Whether the current stream of `device` is being captured into a CUDA graph (what PyTorch's
// at::cuda::currentStreamCaptureStatus() answers inside its kernels).
bool current_stream_is_capturing(const c10::Device& device);

std::string json_string(const std::string& text);

}  // namespace attnpack_torch
