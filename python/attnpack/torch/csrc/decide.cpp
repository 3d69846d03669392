// Deciding one SDPA call: PyTorch-level checks, the bundle of the tensors' device, the runtime's
// selection, and the bookkeeping every decision leaves behind (stats, ATTNPACK_LOG lines).
#include "attnpack_torch.hpp"

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>

namespace attnpack_torch {

const char* entry_word(Entry entry) {
  switch (entry) {
    case Entry::FlashForward: return "flash_fwd";
    case Entry::FlashBackward: return "flash_bwd";
    case Entry::EfficientForward: return "efficient_fwd";
    case Entry::EfficientBackward: return "efficient_bwd";
  }
  return "?";
}

const char* entry_op_name(Entry entry) {
  switch (entry) {
    case Entry::FlashForward: return "aten::_scaled_dot_product_flash_attention";
    case Entry::FlashBackward: return "aten::_scaled_dot_product_flash_attention_backward";
    case Entry::EfficientForward: return "aten::_scaled_dot_product_efficient_attention";
    case Entry::EfficientBackward: return "aten::_scaled_dot_product_efficient_attention_backward";
  }
  return "?";
}

namespace {

const char* dtype_word(at::ScalarType type) {
  switch (type) {
    case at::kHalf: return "fp16";
    case at::kBFloat16: return "bf16";
    case at::kFloat: return "fp32";
    case at::kDouble: return "fp64";
    default: return c10::toString(type);
  }
}

// fp32 goes to the runtime too: it answers "dtype fp32 not built" today, and serves it the day
// an archive holds fp32 kernels.
std::optional<attnpack_dtype> runtime_dtype(at::ScalarType type) {
  switch (type) {
    case at::kHalf: return ATTNPACK_DTYPE_FP16;
    case at::kBFloat16: return ATTNPACK_DTYPE_BF16;
    case at::kFloat: return ATTNPACK_DTYPE_FP32;
    default: return std::nullopt;
  }
}

bool fits_int32(int64_t v) { return v >= 0 && v <= std::numeric_limits<int32_t>::max(); }

// Warns once per distinct text: failures that repeat on every call would drown the user.
void warn_once(const std::string& key, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!warned.insert(key).second) return;
  }
  TORCH_WARN(message);
}

}  // namespace

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char ch : text) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (ch < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", ch);
          out += buffer;
        } else {
          out += char(ch);
        }
    }
  }
  return out + "\"";
}

namespace {
std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

std::string sizes_text(const at::Tensor& t) {
  std::string text = "[";
  if (t.defined()) {
    for (int64_t d = 0; d < t.dim(); ++d) text += (d ? ", " : "") + std::to_string(t.size(d));
  }
  return text + "]";
}
}  // namespace

// Plain string building, no iostreams: with an ostringstream here, ATTNPACK_LOG lines and explain
// segfaulted on the H200 machine (torch 2.11, g++ 13); the backtrace ended in
// ostream::_M_insert<long> called from this function.
std::string describe(const Call& call) {
  std::string out = entry_word(call.entry);
  const at::Tensor& q = *call.query;
  const at::Tensor& k = *call.key;
  if (q.defined() && k.defined() && q.dim() == 4 && k.dim() == 4) {
    out += std::string(" ") + dtype_word(q.scalar_type()) + " B=" + std::to_string(q.size(0)) +
           " Hq=" + std::to_string(q.size(1)) + " Hkv=" + std::to_string(k.size(1)) +
           " Sq=" + std::to_string(q.size(2)) + " Sk=" + std::to_string(k.size(2)) +
           " D=" + std::to_string(q.size(3));
  } else {
    out += " q=" + sizes_text(q) + " k=" + sizes_text(k);
  }
  out += call.is_causal ? " causal" : " full";
  // F.sdpa's flash path always passes the scale; only a non-default one is worth a word.
  const bool default_scale = q.defined() && q.dim() == 4 && call.scale &&
                             std::abs(*call.scale - 1.0 / std::sqrt(double(q.size(3)))) <= 1e-9 * *call.scale;
  if (call.scale && !default_scale) out += " scale=" + number(*call.scale);
  if (call.dropout_p > 0) out += " dropout_p=" + number(call.dropout_p);
  if (call.return_debug_mask) out += " return_debug_mask";
  if (call.has_attn_bias) out += " attn_bias";
  if (call.deterministic && is_backward(call.entry)) out += " deterministic";
  if (q.defined() && q.is_cuda()) out += " on cuda:" + std::to_string(q.device().index());
  return out;
}

// Whether a kernel's outputs are bitwise equal for equal inputs, as its family declares it
// (FamilySpec.deterministic_backward, carried by the archive's index).
bool backward_is_deterministic(const attnpack_kernel_info& kernel) { return kernel.deterministic != 0; }

void warn_nondeterministic(const Decision& decision) {
  // Once per process, like the TORCH_WARN_ONCE of PyTorch's flash and efficient backward in the
  // same mode (and every time under torch.set_warn_always(True)).
  TORCH_WARN_ONCE("attnpack: the backward kernel ", decision.kernel.name, " (", decision.kernel.family,
                  " family) is a non-deterministic algorithm. To explicitly enable determinism call "
                  "torch.use_deterministic_algorithms(True, warn_only=False); attnpack then leaves "
                  "such calls to PyTorch's deterministic kernels.");
}

std::string unservable_reason(const Call& call) {
  const bool backward = is_backward(call.entry);
  const at::Tensor* tensors[] = {call.query, call.key, call.value, call.out, call.grad_out};
  const int count = backward ? 5 : 3;
  for (int i = 0; i < count; ++i) {
    const at::Tensor* t = tensors[i];
    if (!t || !t->defined()) return "undefined input tensor";
    if (t->is_nested()) return "nested tensor";
    if (t->layout() != at::kStrided) return "not a strided tensor";
    if (t->dim() != 4) return "not a 4-D [B, H, S, D] tensor";
  }
  const at::Tensor& q = *call.query;
  const at::Tensor& k = *call.key;
  const at::Tensor& v = *call.value;
  for (int i = 1; i < count; ++i) {
    if (tensors[i]->scalar_type() != q.scalar_type()) return "inputs of different dtypes";
  }
  if (!runtime_dtype(q.scalar_type())) return std::string("dtype ") + dtype_word(q.scalar_type()) + " not served";
  // PyTorch's flash kernels take fp16 and bf16 only; fp32 on that op must meet their error.
  if (is_flash(call.entry) && q.scalar_type() == at::kFloat) return "dtype fp32 on the flash op";
  if (call.return_debug_mask) return "return_debug_mask";  // PyTorch allows it only with dropout
  if (call.dropout_p > 0.0) return "dropout_p > 0";
  if (call.has_attn_bias) return "attn_bias";
  // Without a bias PyTorch's kernel rejects this ("bias_requires_grad is true but no bias was
  // provided"); with one, attn_bias above already sent it there.
  if (call.wants_bias_grad) return "grad_input_mask asks for a bias gradient";
  if (call.packed_varlen) return "cumulative sequence lengths (a packed varlen call)";
  // The runtime reads scale 0 as "the default 1/sqrt(D)"; an explicit 0 must not become that.
  // The kernels take the row max on unscaled scores, which is the max only for a positive scale.
  if (call.scale && !(*call.scale > 0.0 && std::isfinite(*call.scale))) return "scale is not positive and finite";

  const int64_t B = q.size(0), Hq = q.size(1), Sq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Sk = k.size(2);
  if (k.size(0) != B || v.size(0) != B || v.size(1) != Hkv || v.size(2) != Sk || k.size(3) != D) {
    return "q, k, v shapes disagree";
  }
  if (v.size(3) != D) return "value head dim differs from query's";
  if (B == 0 || Hq == 0 || Hkv == 0 || Sq == 0 || Sk == 0 || D == 0) return "empty tensor";
  // What PyTorch's flash kernels take (and its efficient kernels too): a head dim that is a
  // multiple of 8 and at most 256, and a unit stride along it.
  if (D % 8 != 0 || D > 256) return "head dim not a multiple of 8 up to 256";
  for (const at::Tensor* t : {call.query, call.key, call.value}) {
    if (t->stride(3) != 1) return "q, k or v last dim not contiguous";
  }
  if (Hq % Hkv != 0) return "Hq not a multiple of Hkv";
  for (int64_t size : {B, Hq, Hkv, Sq, Sk, D}) {
    if (!fits_int32(size)) return "a size exceeds int32";
  }
  // FlashAttention-2 aligns a causal mask bottom-right when Sq != Sk; the bundle's kernels align
  // it top-left (F.sdpa's meaning, which is why F.sdpa never sends such calls to this op).
  if (is_flash(call.entry) && call.is_causal && Sq != Sk) {
    return "causal with Sq != Sk on the flash op (its mask is bottom-right aligned)";
  }
  // The efficient op's meta kernel gives dK/dV Hq heads: it has no grouped-query form.
  if (!is_flash(call.entry) && Hq != Hkv) return "Hq != Hkv on the efficient op";
  if (backward) {
    if (call.out->sizes() != q.sizes() || call.grad_out->sizes() != q.sizes()) {
      return "out or grad_out shape differs from query's";
    }
    const at::Tensor* lse = call.logsumexp;
    if (!lse || !lse->defined() || lse->scalar_type() != at::kFloat || lse->dim() != 3 ||
        lse->size(0) != B || lse->size(1) != Hq) {
      return "logsumexp is not float32 [B, Hq, Sq]";
    }
    if (lse->size(2) < Sq) return "logsumexp not saved (compute_log_sumexp=False)";
  }
  return "";
}

namespace {

attnpack_tensor make_view(c10::IntArrayRef sizes, c10::IntArrayRef strides, void* data) {
  int64_t s[4];
  for (int d = 0; d < 4; ++d) s[d] = (d < 3 && sizes[d] == 1) ? 0 : strides[d];
  attnpack_tensor view{};
  view.data = data;
  view.stride_b = s[0];
  view.stride_h = s[1];
  view.stride_s = s[2];
  view.stride_d = s[3];
  return view;
}

// The view of an output the kernel will allocate, before it exists (selection checks output
// layouts too): at::empty_like(t) for the flash ops (t's own strides when t is dense, else
// contiguous), [B, S, H, D] memory for the efficient ops (what their meta kernels return).
attnpack_tensor planned_output(Entry entry, const at::Tensor& like) {
  const c10::IntArrayRef sizes = like.sizes();
  if (is_flash(entry)) {
    if (like.is_non_overlapping_and_dense()) return make_view(sizes, like.strides(), nullptr);
    const int64_t contiguous[4] = {sizes[1] * sizes[2] * sizes[3], sizes[2] * sizes[3], sizes[3], 1};
    return make_view(sizes, contiguous, nullptr);
  }
  const int64_t bshd[4] = {sizes[2] * sizes[1] * sizes[3], sizes[3], sizes[1] * sizes[3], 1};
  return make_view(sizes, bshd, nullptr);
}

}  // namespace

attnpack_tensor tensor_view(const at::Tensor& t, bool with_pointer) {
  return make_view(t.sizes(), t.strides(), with_pointer ? const_cast<void*>(t.const_data_ptr()) : nullptr);
}

std::string runtime_failure(attnpack_status status, const char* call) {
  const std::string name = attnpack_status_name(status);
  const std::string message = attnpack_last_error();
  warn_once(name + message, "attnpack: " + std::string(call) + " failed (" + name + "): " + message +
                                " -- PyTorch's own kernel serves these calls instead.");
  return "runtime " + name;
}

Decision decide(const Call& call, attnpack_bundle* explain, bool checked) {
  Decision d;
  if (!checked) d.fallback_reason = unservable_reason(call);
  if (!d.served()) return d;
  const at::Tensor& q = *call.query;
  const at::Tensor& k = *call.key;
  const bool launching = explain == nullptr;
  const bool backward = is_backward(call.entry);
  if (launching) {
    const c10::Device device = q.device();
    const at::Tensor* others[] = {call.key, call.value, call.out, call.grad_out, call.logsumexp};
    bool same = device.is_cuda();
    for (const at::Tensor* t : others) same = same && (!t || t->device() == device);
    if (!same) {
      d.fallback_reason = "inputs not on one CUDA device";
      return d;
    }
    d.bundle = device_bundle(device.index(), &d.fallback_reason);
    if (!d.bundle) return d;
  } else {
    d.bundle = explain;
  }

  attnpack_problem& p = d.problem;
  p.struct_size = sizeof(attnpack_problem);
  p.op = backward ? ATTNPACK_OP_BWD : ATTNPACK_OP_FWD;
  p.dtype = *runtime_dtype(q.scalar_type());
  p.causal = call.is_causal ? 1 : 0;
  p.batch = int32_t(q.size(0));
  p.heads_q = int32_t(q.size(1));
  p.heads_kv = int32_t(k.size(1));
  p.seqlen_q = int32_t(q.size(2));
  p.seqlen_k = int32_t(k.size(2));
  p.head_dim = int32_t(q.size(3));
  p.softmax_scale = call.scale ? float(*call.scale) : 0.0f;
  p.q = tensor_view(q, launching);
  p.k = tensor_view(k, launching);
  p.v = tensor_view(*call.value, launching);
  if (backward) {
    p.o = tensor_view(*call.out, launching);
    p.dout = tensor_view(*call.grad_out, launching);
    p.lse = launching ? const_cast<void*>(call.logsumexp->const_data_ptr()) : nullptr;
    p.dq = planned_output(call.entry, q);
    p.dk = planned_output(call.entry, k);
    p.dv = planned_output(call.entry, *call.value);
  } else {
    p.o = planned_output(call.entry, q);
  }

  // torch.use_deterministic_algorithms(True): the runtime picks among deterministic kernels
  // (a tuning entry's deterministic alternate). Under warn_only the fastest serves, with a warning.
  if (backward && call.deterministic && !call.deterministic_warn_only) p.flags = ATTNPACK_PROBLEM_DETERMINISTIC;
  d.kernel.struct_size = sizeof(attnpack_kernel_info);
  const attnpack_status status = attnpack_select(d.bundle, &p, &d.kernel);
  if (status == ATTNPACK_STATUS_UNSUPPORTED) {
    d.fallback_reason = attnpack_last_error();
  } else if (status != ATTNPACK_STATUS_OK) {
    d.fallback_reason = runtime_failure(status, "attnpack_select");
  } else if (backward && call.deterministic && !backward_is_deterministic(d.kernel)) {
    if (call.deterministic_warn_only) {
      d.nondeterministic = true;  // served, with PyTorch's kind of warning (warn_only=True)
    } else {
      d.fallback_reason = std::string("deterministic mode: the ") + d.kernel.family +
                          " backward is not declared deterministic";
    }
  }
  return d;
}

// ---- bundles, one per CUDA device -----------------------------------------------------------

namespace {

constexpr int64_t kMaxDevices = 64;

struct DeviceSlot {
  std::atomic<attnpack_bundle*> bundle{nullptr};
  bool failed = false;  // guarded by g_bundles_mutex
  std::string reason;   // guarded by g_bundles_mutex
};

std::mutex g_bundles_mutex;
std::string g_directory;  // guarded by g_bundles_mutex
std::array<DeviceSlot, kMaxDevices> g_slots;
std::map<std::pair<std::string, std::string>, attnpack_bundle*> g_explain_bundles;

}  // namespace

void set_bundle_directory(const std::string& directory) {
  std::lock_guard<std::mutex> lock(g_bundles_mutex);
  if (directory == g_directory) return;
  g_directory = directory;
  for (DeviceSlot& slot : g_slots) {
    slot.bundle.store(nullptr, std::memory_order_release);
    slot.failed = false;
    slot.reason.clear();
  }
}

attnpack_bundle* device_bundle(int64_t index, std::string* reason) {
  if (index < 0 || index >= kMaxDevices) {
    *reason = "device index out of range";
    return nullptr;
  }
  DeviceSlot& slot = g_slots[size_t(index)];
  if (attnpack_bundle* bundle = slot.bundle.load(std::memory_order_acquire)) return bundle;

  std::string warning;
  {
    std::lock_guard<std::mutex> lock(g_bundles_mutex);
    if (attnpack_bundle* bundle = slot.bundle.load(std::memory_order_acquire)) return bundle;
    if (slot.failed) {
      *reason = slot.reason;
      return nullptr;
    }
    // The caller made this device current: with `arch` NULL the runtime checks the archive
    // against this device, and its modules load into this device's context.
    attnpack_open_params params{};
    params.struct_size = sizeof(params);
    params.directory = g_directory.empty() ? nullptr : g_directory.c_str();
    attnpack_bundle* bundle = nullptr;
    const attnpack_status status = attnpack_open(&params, &bundle);
    if (status == ATTNPACK_STATUS_OK) {
      slot.bundle.store(bundle, std::memory_order_release);
      return bundle;
    }
    slot.failed = true;
    slot.reason = std::string("no bundle for this GPU (") + attnpack_status_name(status) + ")";
    *reason = slot.reason;
    warning = "attnpack: no usable bundle for cuda:" + std::to_string(index) + ": " +
              attnpack_last_error() + " -- PyTorch's own SDPA kernels serve every call on this " +
              "device (fallback reason '" + slot.reason + "'). Set ATTNPACK_BUNDLE_DIR to the folder " +
              "that holds attnpack-<version>-<arch>.apk for this GPU.";
  }
  TORCH_WARN(warning);  // once per device: the slot stays failed
  return nullptr;
}

attnpack_bundle* explain_bundle(const std::string& path, const std::string& arch, std::string* error) {
  std::lock_guard<std::mutex> lock(g_bundles_mutex);
  auto key = std::make_pair(path, arch);
  auto found = g_explain_bundles.find(key);
  if (found != g_explain_bundles.end()) return found->second;
  attnpack_open_params params{};
  params.struct_size = sizeof(params);
  params.flags = ATTNPACK_OPEN_RECORDING_DRIVER;
  params.path = path.c_str();
  params.arch = arch.empty() ? nullptr : arch.c_str();
  attnpack_bundle* bundle = nullptr;
  const attnpack_status status = attnpack_open(&params, &bundle);
  if (status != ATTNPACK_STATUS_OK) {
    *error = std::string(attnpack_status_name(status)) + ": " + attnpack_last_error();
    return nullptr;
  }
  g_explain_bundles.emplace(key, bundle);
  return bundle;
}

void* current_stream(const c10::Device& device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device).native_handle();
}

namespace {

// cuStreamIsCapturing and hipStreamIsCapturing share this shape; status 0 means "not capturing".
using StreamIsCapturing = int (*)(void* stream, int* status);

// The driver's query, from the driver library this process already loaded (torch's CUDA or HIP
// runtime loaded it); nullptr when neither is loaded.
StreamIsCapturing driver_capture_query() {
  static const StreamIsCapturing query = [] {
    const std::pair<const char*, const char*> candidates[] = {
        {"libcuda.so.1", "cuStreamIsCapturing"},
        {"libamdhip64.so", "hipStreamIsCapturing"},
        {"libamdhip64.so.7", "hipStreamIsCapturing"},
        {"libamdhip64.so.6", "hipStreamIsCapturing"}};
    for (const auto& [library, symbol] : candidates) {
      if (void* handle = ::dlopen(library, RTLD_NOW | RTLD_NOLOAD)) {
        if (void* fn = ::dlsym(handle, symbol)) return reinterpret_cast<StreamIsCapturing>(fn);
      }
    }
    return StreamIsCapturing(nullptr);
  }();
  return query;
}

// c10's device-generic query (DeviceGuardImplInterface::isStreamCapturing) exists from torch
// 2.12 on; older torch (2.11 on the H200) gets the driver's answer for the same stream.
template <typename Impl, typename = void>
struct HasCaptureQuery : std::false_type {};
template <typename Impl>
struct HasCaptureQuery<Impl, std::void_t<decltype(std::declval<const Impl&>().isStreamCapturing(
                                 std::declval<const c10::Stream&>()))>> : std::true_type {};

template <typename Impl>
bool stream_is_capturing(const Impl* impl, const c10::Stream& stream) {
  if constexpr (HasCaptureQuery<Impl>::value) {
    return impl->isStreamCapturing(stream);
  } else {
    const StreamIsCapturing query = driver_capture_query();
    int status = 0;
    return query && query(stream.native_handle(), &status) == 0 && status != 0;
  }
}

}  // namespace

bool current_stream_is_capturing(const c10::Device& device) {
  const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(device.type());
  return stream_is_capturing(impl, impl->getStream(device));
}

// ---- stats and the decision log ---------------------------------------------------------------

namespace {

bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value && *value && std::strcmp(value, "0") != 0 && std::strcmp(value, "false") != 0;
}

struct DeviceStats {
  std::map<std::string, uint64_t> kernels;    // served calls per kernel
  std::map<std::string, uint64_t> fallbacks;  // fallbacks per reason
};

struct Stats {
  std::mutex mutex;
  std::map<std::string, uint64_t> kernels;    // served calls per kernel
  std::map<std::string, uint64_t> fallbacks;  // fallbacks per reason
  std::map<std::pair<int, int>, DeviceStats> devices;  // the same per device of the call: (type, index)
  std::array<uint64_t, kNumEntries> served{};
  std::array<uint64_t, kNumEntries> fell_back{};
  uint64_t deterministic_backward = 0;        // backward calls served in deterministic mode
};

// Counted per call, so a key with no string to build; stats_json() spells it ("cuda:1").
std::pair<int, int> device_of(const Call& call) {
  if (!call.query || !call.query->defined()) return {-1, -1};
  const c10::Device device = call.query->device();
  return {int(device.type()), int(device.index())};
}

std::string device_text(const std::pair<int, int>& key) {
  if (key.first < 0) return "unknown";
  return c10::Device(c10::DeviceType(key.first), c10::DeviceIndex(key.second)).str();
}

Stats& stats() {
  static Stats* instance = new Stats();  // never destroyed: kernels may run during exit
  return *instance;
}

std::atomic<bool> g_logging{env_flag("ATTNPACK_LOG")};

void log_once(const Call& call, const std::string& verdict) {
  static std::mutex mutex;
  static std::set<std::string>* logged = new std::set<std::string>();
  std::string line = describe(call) + " -> " + verdict;
  std::lock_guard<std::mutex> lock(mutex);
  if (logged->insert(line).second) std::fprintf(stderr, "attnpack: %s\n", line.c_str());
}

}  // namespace

void set_logging(bool on) { g_logging.store(on); }
bool logging() { return g_logging.load(std::memory_order_relaxed); }

void record_served(const Call& call, const Decision& decision) {
  {
    Stats& s = stats();
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.kernels[decision.kernel.name];
    ++s.devices[device_of(call)].kernels[decision.kernel.name];
    ++s.served[size_t(call.entry)];
    if (is_backward(call.entry) && call.deterministic && !decision.nondeterministic) ++s.deterministic_backward;
  }
  if (logging()) log_once(call, std::string(decision.kernel.family) + " " + decision.kernel.name);
}

void record_fallback(const Call& call, const std::string& reason) {
  {
    Stats& s = stats();
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.fallbacks[reason];
    ++s.devices[device_of(call)].fallbacks[reason];
    ++s.fell_back[size_t(call.entry)];
  }
  if (logging()) log_once(call, "fallback: " + reason);
}

std::string stats_json() {
  Stats& s = stats();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto counts = [](const std::map<std::string, uint64_t>& map) {
    std::string out = "{";
    for (const auto& [name, n] : map) {
      if (out.size() > 1) out += ", ";
      out += json_string(name) + ": " + std::to_string(n);
    }
    return out + "}";
  };
  std::string ops = "{";
  for (int e = 0; e < kNumEntries; ++e) {
    if (e) ops += ", ";
    ops += std::string("\"") + entry_word(Entry(e)) + "\": {\"served\": " + std::to_string(s.served[e]) +
           ", \"fallback\": " + std::to_string(s.fell_back[e]) + "}";
  }
  ops += "}";
  std::string devices = "{";
  for (const auto& [device, d] : s.devices) {
    if (devices.size() > 1) devices += ", ";
    devices += json_string(device_text(device)) + ": {\"calls\": " + counts(d.kernels) + ", \"fallbacks\": " +
               counts(d.fallbacks) + "}";
  }
  devices += "}";
  return "{\"calls\": " + counts(s.kernels) + ", \"fallbacks\": " + counts(s.fallbacks) +
         ", \"devices\": " + devices + ", \"ops\": " + ops +
         ", \"deterministic_backward\": " + std::to_string(s.deterministic_backward) + "}";
}

void reset_stats() {
  Stats& s = stats();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.kernels.clear();
  s.fallbacks.clear();
  s.devices.clear();
  s.served.fill(0);
  s.fell_back.fill(0);
  s.deterministic_backward = 0;
}

}  // namespace attnpack_torch
