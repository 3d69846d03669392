// C++ conveniences over the C API (attnpack.h), header-only: an owning Bundle, problems with
// struct_size set, strings instead of buffers. Failures throw attnpack::Error; a problem the
// bundle does not serve is not a failure: forward/backward return false and say why, so the
// caller falls back.
//
//   attnpack::Bundle bundle = attnpack::Bundle::open();        // the device's archive
//   attnpack::Problem problem(ATTNPACK_OP_FWD, ATTNPACK_DTYPE_BF16, B, Hq, Hkv, Sq, Sk, D);
//   problem.q = {q_ptr, q_stride_b, q_stride_h, q_stride_s, 1}; ...
//   std::string why;
//   if (!bundle.forward(problem, stream, nullptr, 0, &why)) fall_back(why);
#ifndef ATTNPACK_ATTNPACK_HPP
#define ATTNPACK_ATTNPACK_HPP

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attnpack/attnpack.h"

namespace attnpack {

class Error : public std::runtime_error {
 public:
  Error(attnpack_status status, const std::string& message)
      : std::runtime_error(std::string(attnpack_status_name(status)) + ": " + message),
        status_(status),
        message_(message) {}
  attnpack_status status() const { return status_; }
  const std::string& message() const { return message_; }

 private:
  attnpack_status status_;
  std::string message_;
};

inline void check(attnpack_status status) {
  if (status != ATTNPACK_STATUS_OK) throw Error(status, attnpack_last_error());
}

// attnpack_problem with struct_size set and everything else zero.
struct Problem : attnpack_problem {
  Problem() : attnpack_problem() { struct_size = sizeof(attnpack_problem); }
  Problem(attnpack_op op_, attnpack_dtype dtype_, int32_t B, int32_t Hq, int32_t Hkv, int32_t Sq,
          int32_t Sk, int32_t D, bool causal_ = false, float scale = 0.0f)
      : Problem() {
    op = op_;
    dtype = dtype_;
    batch = B;
    heads_q = Hq;
    heads_kv = Hkv;
    seqlen_q = Sq;
    seqlen_k = Sk;
    head_dim = D;
    causal = causal_ ? 1 : 0;
    softmax_scale = scale;
  }
};

static_assert(sizeof(Problem) == sizeof(attnpack_problem), "Problem adds no fields: arrays of it are C arrays");

class Bundle {
 public:
  // path: one archive; else the archive for `arch` (or the device's) in `directory` (or
  // $ATTNPACK_BUNDLE_DIR, or <dir of libattnpack.so>/attnpack).
  static Bundle open(const std::string& path = "", const std::string& arch = "",
                     const std::string& directory = "", uint32_t flags = 0) {
    attnpack_open_params params = {};
    params.struct_size = sizeof(params);
    params.flags = flags;
    params.path = path.empty() ? nullptr : path.c_str();
    params.arch = arch.empty() ? nullptr : arch.c_str();
    params.directory = directory.empty() ? nullptr : directory.c_str();
    attnpack_bundle* handle = nullptr;
    check(attnpack_open(&params, &handle));
    return Bundle(handle);
  }

  Bundle(Bundle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Bundle& operator=(Bundle&& other) noexcept {
    if (this != &other) {
      attnpack_close(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Bundle(const Bundle&) = delete;
  Bundle& operator=(const Bundle&) = delete;
  ~Bundle() { attnpack_close(handle_); }

  attnpack_bundle* get() const { return handle_; }

  attnpack_bundle_info info() const {
    attnpack_bundle_info info = {};
    info.struct_size = sizeof(info);
    check(attnpack_bundle_info_get(handle_, &info));
    return info;
  }

  // The serving kernel's name; false (and why, in `reason`) when the problem is not served.
  bool select(const attnpack_problem& problem, std::string* kernel, std::string* reason = nullptr) const {
    attnpack_kernel_info info = {};
    info.struct_size = sizeof(info);
    attnpack_status status = attnpack_select(handle_, &problem, &info);
    if (status == ATTNPACK_STATUS_UNSUPPORTED) return unsupported(reason);
    check(status);
    if (kernel) *kernel = info.name;
    return true;
  }

  std::string explain(const attnpack_problem& problem) const {
    return text([&](char* buffer, size_t capacity, size_t* length) {
      return attnpack_explain(handle_, &problem, buffer, capacity, length);
    });
  }

  uint64_t workspace_size(const attnpack_problem& problem) const {
    uint64_t bytes = 0;
    check(attnpack_workspace_size(handle_, &problem, &bytes));
    return bytes;
  }

  void preload(const std::vector<Problem>& problems = {}) const {
    check(attnpack_preload(handle_, problems.empty() ? nullptr : problems.data(), problems.size()));
  }

  // false (and why) when the problem is not served: nothing was launched, fall back.
  bool forward(const attnpack_problem& problem, void* stream, void* workspace = nullptr,
               uint64_t workspace_size = 0, std::string* reason = nullptr) const {
    attnpack_launch_params launch = launch_params(stream, workspace, workspace_size);
    attnpack_status status = attnpack_forward(handle_, &problem, &launch);
    if (status == ATTNPACK_STATUS_UNSUPPORTED) return unsupported(reason);
    check(status);
    return true;
  }

  bool backward(const attnpack_problem& problem, void* stream, void* workspace = nullptr,
                uint64_t workspace_size = 0, std::string* reason = nullptr) const {
    attnpack_launch_params launch = launch_params(stream, workspace, workspace_size);
    attnpack_status status = attnpack_backward(handle_, &problem, &launch);
    if (status == ATTNPACK_STATUS_UNSUPPORTED) return unsupported(reason);
    check(status);
    return true;
  }

  // {"calls": {kernel: n}, "unsupported": {reason: n}, "modules_loaded": n}
  std::string stats_json() const {
    return text([&](char* buffer, size_t capacity, size_t* length) {
      return attnpack_stats(handle_, buffer, capacity, length);
    });
  }

 private:
  explicit Bundle(attnpack_bundle* handle) : handle_(handle) {}

  static bool unsupported(std::string* reason) {
    if (reason) *reason = attnpack_last_error();
    return false;
  }

  static attnpack_launch_params launch_params(void* stream, void* workspace, uint64_t size) {
    attnpack_launch_params launch = {};
    launch.struct_size = sizeof(launch);
    launch.stream = stream;
    launch.workspace = workspace;
    launch.workspace_size = size;
    return launch;
  }

  template <typename Call>
  static std::string text(Call call) {
    size_t length = 0;
    check(call(nullptr, 0, &length));
    std::string out(length + 1, '\0');
    check(call(&out[0], out.size(), &length));
    out.resize(length);
    return out;
  }

  attnpack_bundle* handle_ = nullptr;
};

}  // namespace attnpack

#endif  // ATTNPACK_ATTNPACK_HPP
