// The overriding CUDA kernels of the SDPA ops, their activation, and the C entry points the
// Python package calls through ctypes (attnpack/torch/_extension.py).
//
// Each kernel decides its call (decide.cpp). A served call allocates exactly the outputs the
// op's meta kernel promises (torch/_meta_registrations.py), so fake tensors, torch.compile and
// autograd see no difference, and runs the bundle's kernel on the current stream with workspace
// from the caching allocator: no host sync, CUDA-graph capturable once the kernel is loaded.
// Any other call goes to PyTorch's own kernel, captured before the override, and the reason is
// counted. A thread-local flag makes anything PyTorch's kernel dispatches go straight to
// PyTorch too, so a fallback never recurses into attnpack.
#include "attnpack_torch.hpp"
#include "attnpack/torch.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>

#define ATTNPACK_TORCH_API extern "C" __attribute__((visibility("default")))

namespace attnpack_torch {
namespace {

// ---- PyTorch's own kernels -------------------------------------------------------------------

// What the dispatch table held for the CUDA key of each op when attnpack was activated. These
// are c10::SafeKernelFunction, what torch.library.get_kernel returns in Python.
struct Originals {
  std::array<std::optional<c10::SafeKernelFunction>, kNumEntries> kernels;
  std::array<std::string, kNumEntries> missing;  // why a kernel could not be captured
};

// Replaced when an activation finds other kernels underneath, and never freed: a kernel running
// on another thread may still be reading the previous one.
std::atomic<const Originals*> g_originals{nullptr};

thread_local bool t_in_original = false;

struct OriginalScope {
  bool previous = t_in_original;
  OriginalScope() { t_in_original = true; }
  ~OriginalScope() { t_in_original = previous; }
};

torch::jit::Stack call_original(Entry entry, c10::DispatchKeySet keys, torch::jit::Stack stack) {
  const Originals* originals = g_originals.load(std::memory_order_acquire);
  TORCH_CHECK(originals && originals->kernels[size_t(entry)].has_value(),
              "attnpack: PyTorch has no CUDA kernel of ", entry_op_name(entry), " to fall back to (",
              originals ? originals->missing[size_t(entry)] : std::string("not activated"), ")");
  const c10::SafeKernelFunction& kernel = *originals->kernels[size_t(entry)];
  OriginalScope scope;
  kernel.callBoxed(kernel.opHandle(), keys, &stack);
  return stack;
}

at::Tensor tensor_of(const c10::IValue& value) { return value.isNone() ? at::Tensor() : value.toTensor(); }

// Efficient-attention LSE rows are padded to this many (ceil(Sq/32)*32 on CUDA; 1, i.e. none,
// on ROCm), as the op's meta kernel says. Set at activation.
std::atomic<int64_t> g_efficient_lse_align{32};

// ---- running a decided call ------------------------------------------------------------------

// Runs the decided kernel on the current stream. False, with the reason set, if the runtime
// refused at launch; nothing has been written to any output then that a caller would keep.
bool launch(Decision& d, Entry entry, const at::Tensor& like) {
  uint64_t bytes = 0;
  attnpack_status status = attnpack_workspace_size(d.bundle, &d.problem, &bytes);
  if (status == ATTNPACK_STATUS_OK) {
    at::Tensor workspace;  // the caching allocator frees it stream-ordered: safe while the kernel runs
    if (bytes > 0) workspace = at::empty({int64_t(bytes)}, like.options().dtype(at::kByte));
    attnpack_launch_params params{};
    params.struct_size = sizeof(params);
    params.stream = current_stream(like.device());
    params.workspace = bytes > 0 ? workspace.data_ptr() : nullptr;
    params.workspace_size = bytes;
    status = is_backward(entry) ? attnpack_backward(d.bundle, &d.problem, &params)
                                : attnpack_forward(d.bundle, &d.problem, &params);
    if (status == ATTNPACK_STATUS_OK) return true;
  }
  d.fallback_reason = status == ATTNPACK_STATUS_UNSUPPORTED
                          ? std::string(attnpack_last_error())
                          : runtime_failure(status, is_backward(entry) ? "attnpack_backward" : "attnpack_forward");
  return false;
}

Call make_call(Entry entry, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
               double dropout_p, bool is_causal, std::optional<double> scale) {
  Call call;
  call.entry = entry;
  call.query = &query;
  call.key = &key;
  call.value = &value;
  call.dropout_p = dropout_p;
  call.is_causal = is_causal;
  call.scale = scale;
  call.deterministic = is_backward(entry) && at::globalContext().deterministicAlgorithms();
  call.deterministic_warn_only = call.deterministic && at::globalContext().deterministicAlgorithmsWarnOnly();
  return call;
}

std::string internal_error(const std::exception& e) {
  std::string what = e.what();
  what = what.substr(0, what.find('\n'));
  TORCH_WARN_ONCE("attnpack: internal error, PyTorch's own kernel serves the call: ", what);
  return "attnpack internal error";
}

// The backward kernels read dO with a unit last-dim stride (any other stride, 0 included, is
// fine), and LSE as contiguous [B, Hq, Sq] (the efficient op pads its rows).
at::Tensor unit_last_stride(const at::Tensor& t) {
  return t.stride(3) == 1 ? t : t.contiguous();
}

at::Tensor lse_rows(const at::Tensor& logsumexp, int64_t seqlen_q) {
  at::Tensor rows = logsumexp.size(2) == seqlen_q ? logsumexp : logsumexp.narrow(2, 0, seqlen_q);
  return rows.is_contiguous() ? rows : rows.contiguous();
}

// The backward path both ops share: the checks a call needs before any tensor is touched, then
// dOut with a unit last stride and LSE as [B, Hq, Sq] rows, the decision, and a launch into the
// gradients `allocate` returns (dq, dk, dv). nullopt, with the fallback recorded, when
// PyTorch's own kernel must serve the call.
template <typename Allocate>
std::optional<std::array<at::Tensor, 3>> serve_backward(Call& call, const at::Tensor& out,
                                                        const at::Tensor& grad_out,
                                                        const at::Tensor& logsumexp, Allocate allocate) {
  const at::Tensor& query = *call.query;
  call.out = &out;
  call.grad_out = &grad_out;
  call.logsumexp = &logsumexp;
  try {
    std::string reason = unservable_reason(call);
    if (reason.empty()) {
      c10::DeviceGuard guard(query.device());
      const at::Tensor dout = unit_last_stride(grad_out);
      const at::Tensor lse = lse_rows(logsumexp, query.size(2));
      call.grad_out = &dout;
      call.logsumexp = &lse;
      Decision d = decide(call, nullptr, /*checked=*/true);
      if (d.served()) {
        std::array<at::Tensor, 3> grads = allocate();
        d.problem.dq = tensor_view(grads[0], true);
        d.problem.dk = tensor_view(grads[1], true);
        d.problem.dv = tensor_view(grads[2], true);
        if (launch(d, call.entry, query)) {
          record_served(call, d);
          if (d.nondeterministic) warn_nondeterministic(d);
          return grads;
        }
      }
      reason = d.fallback_reason;
    }
    call.grad_out = &grad_out;
    call.logsumexp = &logsumexp;
    record_fallback(call, reason);
  } catch (const std::exception& e) {
    call.grad_out = &grad_out;
    call.logsumexp = &logsumexp;
    record_fallback(call, internal_error(e));
  }
  return std::nullopt;
}

// ---- the four kernels ------------------------------------------------------------------------

using FlashForwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt,
                                      at::Tensor, at::Tensor, at::Tensor>;

FlashForwardResult flash_forward(c10::DispatchKeySet keys, const at::Tensor& query, const at::Tensor& key,
                                 const at::Tensor& value, double dropout_p, bool is_causal,
                                 bool return_debug_mask, std::optional<double> scale) {
  if (!t_in_original) {
    Call call = make_call(Entry::FlashForward, query, key, value, dropout_p, is_causal, scale);
    call.return_debug_mask = return_debug_mask;
    try {
      c10::DeviceGuard guard(query.device());
      Decision d = decide(call);
      if (d.served()) {
        const int64_t B = query.size(0), Hq = query.size(1), Sq = query.size(2), Sk = key.size(2);
        at::Tensor out = at::empty_like(query);
        at::Tensor lse = at::empty({B, Hq, Sq}, query.options().dtype(at::kFloat));
        d.problem.o = tensor_view(out, true);
        d.problem.lse = lse.data_ptr();
        if (launch(d, call.entry, query)) {
          record_served(call, d);
          // No dropout, so no RNG state: the same empty uint64 tensors PyTorch's flash returns.
          const auto rng = query.options().dtype(at::kUInt64);
          return {out, lse, at::Tensor(), at::Tensor(), c10::SymInt(Sq), c10::SymInt(Sk),
                  at::empty({2}, rng), at::empty({}, rng), at::empty({0}, query.options())};
        }
      }
      record_fallback(call, d.fallback_reason);
    } catch (const std::exception& e) {
      record_fallback(call, internal_error(e));
    }
  }
  torch::jit::Stack out = call_original(Entry::FlashForward, keys,
                                        {query, key, value, dropout_p, is_causal, return_debug_mask, scale});
  return {tensor_of(out[0]), tensor_of(out[1]), tensor_of(out[2]), tensor_of(out[3]), out[4].toSymInt(),
          out[5].toSymInt(), tensor_of(out[6]), tensor_of(out[7]), tensor_of(out[8])};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_backward(
    c10::DispatchKeySet keys, const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& cum_seq_q,
    const at::Tensor& cum_seq_k, c10::SymInt max_q, c10::SymInt max_k, double dropout_p, bool is_causal,
    const at::Tensor& philox_seed, const at::Tensor& philox_offset, std::optional<double> scale) {
  if (!t_in_original) {
    Call call = make_call(Entry::FlashBackward, query, key, value, dropout_p, is_causal, scale);
    call.packed_varlen = cum_seq_q.defined() || cum_seq_k.defined();
    auto grads = serve_backward(call, out, grad_out, logsumexp, [&] {
      return std::array<at::Tensor, 3>{at::empty_like(query), at::empty_like(key), at::empty_like(value)};
    });
    if (grads) return {(*grads)[0], (*grads)[1], (*grads)[2]};
  }
  torch::jit::Stack grads = call_original(
      Entry::FlashBackward, keys,
      {grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, std::move(max_q), std::move(max_k),
       dropout_p, is_causal, philox_seed, philox_offset, scale});
  return {tensor_of(grads[0]), tensor_of(grads[1]), tensor_of(grads[2])};
}

// [B, S, H, D] memory seen as [B, H, S, D]: the efficient op's output and gradient layout.
at::Tensor empty_bshd(int64_t B, int64_t H, int64_t S, int64_t D, const at::TensorOptions& options) {
  return at::empty({B, S, H, D}, options).transpose(1, 2);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> efficient_forward(
    c10::DispatchKeySet keys, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const std::optional<at::Tensor>& attn_bias, bool compute_log_sumexp, double dropout_p, bool is_causal,
    std::optional<double> scale) {
  if (!t_in_original) {
    Call call = make_call(Entry::EfficientForward, query, key, value, dropout_p, is_causal, scale);
    call.has_attn_bias = attn_bias.has_value() && attn_bias->defined();
    try {
      c10::DeviceGuard guard(query.device());
      Decision d = decide(call);
      if (d.served()) {
        const int64_t B = query.size(0), H = query.size(1), Sq = query.size(2), D = query.size(3);
        const at::TensorOptions f32 = query.options().dtype(at::kFloat);
        at::Tensor out = empty_bshd(B, H, Sq, D, query.options());
        at::Tensor rows = at::empty({B, H, Sq}, f32);  // what the kernel writes
        d.problem.o = tensor_view(out, true);
        d.problem.lse = rows.data_ptr();
        if (launch(d, call.entry, query)) {
          const int64_t align = g_efficient_lse_align.load(std::memory_order_relaxed);
          const int64_t padded = (Sq + align - 1) / align * align;
          at::Tensor lse;
          if (!compute_log_sumexp) {
            lse = at::empty({B, H, 0}, f32);
          } else if (padded == Sq) {
            lse = rows;
          } else {
            // +inf in the padding rows: a reader that touches them gets exp(s - inf) = 0.
            lse = at::empty({B, H, padded}, f32);
            lse.narrow(2, 0, Sq).copy_(rows);
            lse.narrow(2, Sq, padded - Sq).fill_(std::numeric_limits<float>::infinity());
          }
          record_served(call, d);
          // No dropout: PyTorch's efficient op returns these two as empty int64 scalars, on the
          // CPU, or on the GPU while the stream is being captured into a CUDA graph (its
          // "Seed and Offset Device" rule: every output of a captured op lives on the device).
          const c10::Device rng_device = current_stream_is_capturing(query.device()) ? query.device()
                                                                                     : c10::Device(at::kCPU);
          const auto rng = at::dtype(at::kLong).device(rng_device);
          return {out, lse, at::empty({}, rng), at::empty({}, rng)};
        }
      }
      record_fallback(call, d.fallback_reason);
    } catch (const std::exception& e) {
      record_fallback(call, internal_error(e));
    }
  }
  torch::jit::Stack out = call_original(Entry::EfficientForward, keys,
                                        {query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, scale});
  return {tensor_of(out[0]), tensor_of(out[1]), tensor_of(out[2]), tensor_of(out[3])};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> efficient_backward(
    c10::DispatchKeySet keys, const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& attn_bias, const at::Tensor& out, const at::Tensor& logsumexp,
    const at::Tensor& philox_seed, const at::Tensor& philox_offset, double dropout_p,
    std::array<bool, 4> grad_input_mask, bool is_causal, std::optional<double> scale) {
  if (!t_in_original) {
    Call call = make_call(Entry::EfficientBackward, query, key, value, dropout_p, is_causal, scale);
    call.has_attn_bias = attn_bias.defined();
    call.wants_bias_grad = grad_input_mask[3];
    auto grads = serve_backward(call, out, grad_out, logsumexp, [&] {
      const int64_t B = query.size(0), H = query.size(1), Sq = query.size(2), Sk = key.size(2),
                    D = query.size(3);
      return std::array<at::Tensor, 3>{empty_bshd(B, H, Sq, D, query.options()),
                                       empty_bshd(B, H, Sk, D, key.options()),
                                       empty_bshd(B, H, Sk, D, value.options())};
    });
    if (grads) return {(*grads)[0], (*grads)[1], (*grads)[2], at::Tensor()};
  }
  torch::jit::Stack grads = call_original(
      Entry::EfficientBackward, keys,
      {grad_out, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
       grad_input_mask, is_causal, scale});
  return {tensor_of(grads[0]), tensor_of(grads[1]), tensor_of(grads[2]), tensor_of(grads[3])};
}

// ---- activation ------------------------------------------------------------------------------

std::mutex g_activation_mutex;
std::unique_ptr<torch::Library> g_library;  // the overrides; destroying it restores PyTorch's

// Replacing a kernel makes the dispatcher warn "Overriding a previously registered kernel";
// here that is the point, so the warning is dropped (others pass through).
class DropOverrideWarning : public c10::WarningHandler {
 public:
  explicit DropOverrideWarning(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("Overriding a previously registered kernel") != std::string::npos) return;
    next_->process(warning);
  }

 private:
  c10::WarningHandler* next_;
};

void activate() {
  std::lock_guard<std::mutex> lock(g_activation_mutex);
  if (g_library) return;
  auto* originals = new Originals();
  for (int e = 0; e < kNumEntries; ++e) {
    const char* name = entry_op_name(Entry(e));
    try {
      c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
      originals->kernels[size_t(e)].emplace(op.getComputedKernelForDispatchKey(c10::DispatchKey::CUDA));
    } catch (const c10::Error& error) {
      // A CPU-only torch has none; its CUDA kernels are never called.
      originals->missing[size_t(e)] = error.what_without_backtrace();
    }
  }
  // Usually the same kernels as at the previous activation: then that capture stays.
  const Originals* previous = g_originals.load(std::memory_order_acquire);
  bool same = previous != nullptr;
  for (int e = 0; same && e < kNumEntries; ++e) {
    const auto& a = previous->kernels[size_t(e)];
    const auto& b = originals->kernels[size_t(e)];
    same = a.has_value() == b.has_value() && (a ? a->debug() == b->debug()
                                                : previous->missing[size_t(e)] == originals->missing[size_t(e)]);
  }
  if (same) {
    delete originals;
  } else {
    g_originals.store(originals, std::memory_order_release);
  }

  DropOverrideWarning drop(c10::WarningUtils::get_warning_handler());
  c10::WarningUtils::WarningHandlerGuard guard(&drop);
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::CUDA,
                                                  __FILE__, __LINE__);
  library->impl("_scaled_dot_product_flash_attention", TORCH_FN(flash_forward));
  library->impl("_scaled_dot_product_flash_attention_backward", TORCH_FN(flash_backward));
  library->impl("_scaled_dot_product_efficient_attention", TORCH_FN(efficient_forward));
  library->impl("_scaled_dot_product_efficient_attention_backward", TORCH_FN(efficient_backward));
  g_library = std::move(library);
}

void deactivate() {
  std::lock_guard<std::mutex> lock(g_activation_mutex);
  g_library.reset();
}

// ---- the C entry points ------------------------------------------------------------------------

size_t write_text(const std::string& text, char* buffer, size_t capacity) {
  if (buffer && capacity > 0) {
    const size_t n = std::min(capacity - 1, text.size());
    std::memcpy(buffer, text.data(), n);
    buffer[n] = '\0';
  }
  return text.size();
}

template <typename Body>
int guarded(char* error, size_t capacity, Body&& body) noexcept {
  try {
    body();
    write_text("", error, capacity);
    return 0;
  } catch (const c10::Error& e) {
    write_text(e.what_without_backtrace(), error, capacity);
  } catch (const std::exception& e) {
    write_text(e.what(), error, capacity);
  } catch (...) {
    write_text("unknown exception", error, capacity);
  }
  return 1;
}

std::optional<at::ScalarType> scalar_type_of(const char* word) {
  const std::string w = word ? word : "";
  if (w == "fp16") return at::kHalf;
  if (w == "bf16") return at::kBFloat16;
  if (w == "fp32") return at::kFloat;
  if (w == "fp64") return at::kDouble;
  return std::nullopt;
}

std::string bundle_json(attnpack_bundle* bundle) {
  attnpack_bundle_info info{};
  info.struct_size = sizeof(info);
  if (attnpack_bundle_info_get(bundle, &info) != ATTNPACK_STATUS_OK) {
    return "{\"error\": " + json_string(attnpack_last_error()) + "}";
  }
  std::string gpu_entries;  // {GPU model: its own tuning entries}
  for (uint32_t i = 0; i < info.num_gpu_models; ++i) {
    gpu_entries += (i ? ", " : "") + json_string(info.gpu_models[i]) + ": " + std::to_string(info.gpu_entries[i]);
  }
  return "{\"path\": " + json_string(info.path) + ", \"arch\": " + json_string(info.arch) +
         ", \"bundle_version\": " + json_string(info.bundle_version) + ", \"compilers\": " +
         json_string(info.compilers) + ", \"driver\": " + json_string(info.driver) +
         ", \"num_kernels\": " + std::to_string(info.num_kernels) +
         ", \"tuned_on\": " + json_string(info.tuned_on) + ", \"gpu_entries\": {" + gpu_entries + "}}";
}

}  // namespace
}  // namespace attnpack_torch

using namespace attnpack_torch;

// Registers the overriding kernels (capturing PyTorch's first). `bundle_directory` "" lets the
// runtime choose; `efficient_lse_align` is 32 on CUDA builds of torch, 1 on ROCm ones.
ATTNPACK_TORCH_API int attnpack_torch_activate(const char* bundle_directory, int64_t efficient_lse_align,
                                               char* error, size_t capacity) {
  return guarded(error, capacity, [&] {
    TORCH_CHECK(efficient_lse_align >= 1, "efficient_lse_align must be >= 1");
    g_efficient_lse_align.store(efficient_lse_align);
    set_bundle_directory(bundle_directory ? bundle_directory : "");
    activate();
  });
}

ATTNPACK_TORCH_API int attnpack_torch_deactivate(char* error, size_t capacity) {
  return guarded(error, capacity, [] { deactivate(); });
}

namespace {

// at::Context::hasROCM() where this torch has it; else whether a HIP runtime is loaded (a ROCm
// torch loads libamdhip64 at start-up, a CUDA one never does).
template <typename Context>
auto torch_is_rocm(const Context& context, int) -> decltype(context.hasROCM()) {
  return context.hasROCM();
}
template <typename Context>
bool torch_is_rocm(const Context&, long) {
  for (const char* library : {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6"}) {
    if (::dlopen(library, RTLD_NOW | RTLD_NOLOAD)) return true;
  }
  return false;
}

}  // namespace

// attnpack.torch.enable() for programs without Python: the overrides plus the SDPA routing.
ATTNPACK_TORCH_API int attnpack_torch_enable(const char* bundle_directory, char* error, size_t capacity) {
  return guarded(error, capacity, [&] {
    // Efficient-op LSE rows are padded to 32 on CUDA builds of torch, not at all on ROCm ones.
    g_efficient_lse_align.store(torch_is_rocm(at::globalContext(), 0) ? 1 : 32);
    set_bundle_directory(bundle_directory ? bundle_directory : "");
    activate();
    try {
      route_sdpa_to_flash();
    } catch (...) {
      deactivate();
      throw;
    }
  });
}

ATTNPACK_TORCH_API int attnpack_torch_disable(char* error, size_t capacity) {
  return guarded(error, capacity, [] {
    try {
      undo_routing();
    } catch (...) {
      deactivate();
      throw;
    }
    deactivate();
  });
}

ATTNPACK_TORCH_API int attnpack_torch_is_active(void) {
  std::lock_guard<std::mutex> lock(g_activation_mutex);
  return g_library ? 1 : 0;
}

// JSON: {op name: the captured kernel's registration, or why none was}. Empty before activation.
ATTNPACK_TORCH_API size_t attnpack_torch_originals(char* buffer, size_t capacity) {
  const Originals* originals = g_originals.load(std::memory_order_acquire);
  std::string json = "{";
  for (int e = 0; originals && e < kNumEntries; ++e) {
    const auto& kernel = originals->kernels[size_t(e)];
    if (e) json += ", ";
    json += json_string(entry_op_name(Entry(e))) + ": {\"captured\": " + (kernel ? "true" : "false") +
            ", \"detail\": " + json_string(kernel ? kernel->debug() : originals->missing[size_t(e)]) + "}";
  }
  return write_text(json + "}", buffer, capacity);
}

ATTNPACK_TORCH_API size_t attnpack_torch_stats(char* buffer, size_t capacity) {
  return write_text(stats_json(), buffer, capacity);
}

ATTNPACK_TORCH_API void attnpack_torch_reset_stats(void) { reset_stats(); }

ATTNPACK_TORCH_API void attnpack_torch_set_logging(int on) { set_logging(on != 0); }

ATTNPACK_TORCH_API int attnpack_torch_logging(void) { return logging() ? 1 : 0; }

ATTNPACK_TORCH_API const char* attnpack_torch_built_with(void) { return ATTNPACK_TORCH_BUILT_WITH; }

// Loads every kernel of the device's selection table, so that nothing loads later (during
// CUDA-graph capture, say).
ATTNPACK_TORCH_API int attnpack_torch_preload(int64_t device, char* error, size_t capacity) {
  return guarded(error, capacity, [&] {
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, c10::DeviceIndex(device)));
    std::string reason;
    attnpack_bundle* bundle = device_bundle(device, &reason);
    TORCH_CHECK(bundle, "attnpack: ", reason);
    const attnpack_status status = attnpack_preload(bundle, nullptr, 0);
    TORCH_CHECK(status == ATTNPACK_STATUS_OK, "attnpack_preload failed (", attnpack_status_name(status),
                "): ", attnpack_last_error());
  });
}

// JSON about the bundle of CUDA device `device`: {"device", "ok", "reason" | archive fields}.
ATTNPACK_TORCH_API size_t attnpack_torch_bundle_info(int64_t device, char* buffer, size_t capacity) {
  std::string json;
  char error[1024];
  const int failed = guarded(error, sizeof(error), [&] {
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, c10::DeviceIndex(device)));
    std::string reason;
    attnpack_bundle* bundle = device_bundle(device, &reason);
    json = bundle ? "{\"device\": " + std::to_string(device) + ", \"ok\": true, \"bundle\": " + bundle_json(bundle) + "}"
                  : "{\"device\": " + std::to_string(device) + ", \"ok\": false, \"reason\": " + json_string(reason) + "}";
  });
  if (failed) json = "{\"device\": " + std::to_string(device) + ", \"ok\": false, \"reason\": " + json_string(error) + "}";
  return write_text(json, buffer, capacity);
}

// The decision an overridden op would take for a call of this shape, as JSON, computed on meta
// tensors by the same code the kernels run. `archive` "": the bundle of CUDA device `device`;
// else that archive opened with the recording driver for `arch` (no GPU needed).
// shape: B, Hq, Hkv, Sq, Sk, D. entry: 0 flash_fwd, 1 flash_bwd, 2 efficient_fwd, 3 efficient_bwd.
// deterministic: 0 off, 1 torch.use_deterministic_algorithms(True), 2 the same with warn_only.
ATTNPACK_TORCH_API size_t attnpack_torch_explain(int entry, const char* dtype, const int64_t* shape, int causal,
                                                 double dropout_p, int return_debug_mask, int has_scale,
                                                 double scale, int has_attn_bias, int deterministic,
                                                 int64_t device, const char* archive, const char* arch,
                                                 char* buffer, size_t capacity) {
  std::string json;
  char error[2048];
  const int failed = guarded(error, sizeof(error), [&] {
    TORCH_CHECK(entry >= 0 && entry < kNumEntries, "entry must be 0..3");
    const std::optional<at::ScalarType> type = scalar_type_of(dtype);
    TORCH_CHECK(type, "dtype must be fp16, bf16, fp32 or fp64");
    const int64_t B = shape[0], Hq = shape[1], Hkv = shape[2], Sq = shape[3], Sk = shape[4], D = shape[5];
    const at::TensorOptions meta = at::TensorOptions().dtype(*type).device(at::kMeta);
    const Entry e = Entry(entry);
    at::Tensor q = at::empty({B, Hq, Sq, D}, meta);
    at::Tensor k = at::empty({B, Hkv, Sk, D}, meta), v = at::empty({B, Hkv, Sk, D}, meta);
    at::Tensor o = at::empty_like(q), dout = at::empty_like(q);
    const int64_t align = is_flash(e) ? 1 : g_efficient_lse_align.load();
    at::Tensor lse = at::empty({B, Hq, (Sq + align - 1) / align * align}, meta.dtype(at::kFloat));
    Call call;
    call.entry = e;
    call.query = &q;
    call.key = &k;
    call.value = &v;
    if (is_backward(e)) {
      call.out = &o;
      call.grad_out = &dout;
      call.logsumexp = &lse;
    }
    call.dropout_p = dropout_p;
    call.is_causal = causal != 0;
    call.return_debug_mask = return_debug_mask != 0;
    call.has_attn_bias = has_attn_bias != 0;
    if (has_scale) call.scale = scale;
    call.deterministic = deterministic != 0;
    call.deterministic_warn_only = deterministic == 2;

    std::string reason = unservable_reason(call);
    attnpack_bundle* bundle = nullptr;
    std::optional<c10::DeviceGuard> guard;
    if (reason.empty()) {
      if (archive && *archive) {
        std::string open_error;
        bundle = explain_bundle(archive, arch ? arch : "", &open_error);
        TORCH_CHECK(bundle, "cannot open ", archive, ": ", open_error);
      } else {
        guard.emplace(c10::Device(c10::DeviceType::CUDA, c10::DeviceIndex(device)));
        bundle = device_bundle(device, &reason);
      }
    }
    Decision d;
    if (reason.empty()) {
      d = decide(call, bundle, /*checked=*/true);
      reason = d.fallback_reason;
    }
    std::string runtime_text;
    if (bundle && d.problem.struct_size) {
      size_t length = 0;
      attnpack_explain(bundle, &d.problem, nullptr, 0, &length);
      runtime_text.resize(length + 1);
      if (attnpack_explain(bundle, &d.problem, runtime_text.data(), runtime_text.size(), &length) ==
          ATTNPACK_STATUS_OK) {
        runtime_text.resize(length);
      } else {
        runtime_text = std::string("attnpack_explain failed: ") + attnpack_last_error();
      }
    }
    const bool served = reason.empty();
    json = "{\"entry\": " + json_string(entry_word(e)) + ", \"op\": " + json_string(entry_op_name(e)) +
           ", \"call\": " + json_string(describe(call)) + ", \"served\": " + (served ? "true" : "false") +
           ", \"kernel\": " + (served ? json_string(d.kernel.name) : "null") + ", \"family\": " +
           (served ? json_string(d.kernel.family) : "null") + ", \"reason\": " +
           (served ? "null" : json_string(reason)) + ", \"bundle\": " + (bundle ? bundle_json(bundle) : "null") +
           ", \"runtime\": " + json_string(runtime_text) + ", \"nondeterministic_warning\": " +
           (served && d.nondeterministic ? "true" : "false") + "}";
  });
  if (failed) json = "{\"error\": " + json_string(error) + "}";
  return write_text(json, buffer, capacity);
}
