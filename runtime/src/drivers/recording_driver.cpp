#include "recording_driver.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "../error.hpp"
#include "../json.hpp"
#include "../sha256.hpp"

namespace attnpack {
namespace {

// Tensor maps encoded on this thread since its last launch: they belong to that launch.
thread_local std::vector<TensorMapEncode> pending_tensormaps;
thread_local int32_t thread_device = 0;

std::string tensormap_json(const TensorMapEncode& e) {
  std::vector<uint64_t> dims(e.dims, e.dims + e.rank);
  std::vector<uint64_t> strides(e.strides, e.strides + (e.rank ? e.rank - 1 : 0));
  std::vector<uint32_t> box(e.box, e.box + e.rank);
  std::vector<uint32_t> element_strides(e.element_strides, e.element_strides + e.rank);
  return "{\"data_type\":" + std::to_string(e.data_type) + ",\"rank\":" + std::to_string(e.rank) +
         ",\"address\":" + std::to_string(e.address) + ",\"dims\":" + json_numbers(dims) +
         ",\"strides\":" + json_numbers(strides) + ",\"box\":" + json_numbers(box) +
         ",\"element_strides\":" + json_numbers(element_strides) +
         ",\"interleave\":" + std::to_string(e.interleave) + ",\"swizzle\":" + std::to_string(e.swizzle) +
         ",\"l2_promotion\":" + std::to_string(e.l2_promotion) +
         ",\"oob_fill\":" + std::to_string(e.oob_fill) + "}";
}

}  // namespace

RecordingDriver::RecordingDriver(std::string arch, uint32_t max_shared)
    : arch_(std::move(arch)), max_shared_(max_shared) {
  if (const char* text = std::getenv(kNumSmsVariable); text && *text) {
    char* end = nullptr;
    const long long count = std::strtoll(text, &end, 10);
    if (*end != '\0' || count < 1 || count > 100000) {
      fail(ATTNPACK_STATUS_INVALID_ARGUMENT, std::string(kNumSmsVariable) + "=" + text +
                                                 " is not a multiprocessor count (1..100000); unset it for 132");
    }
    num_sms_ = count;
  }
  // Read here, as the count is: each bundle opened with the recording driver constructs its own.
  if (const char* name = std::getenv(kGpuNameVariable)) gpu_name_ = name;
}

void RecordingDriver::set_thread_device(int32_t device) { thread_device = device; }

ContextKey RecordingDriver::current_context() { return ContextKey(thread_device) + 1; }

DeviceInfo RecordingDriver::device_info() {
  DeviceInfo info;
  info.arch = arch_;
  info.name = gpu_name_;
  info.num_sms = num_sms_;
  info.max_shared_per_block = max_shared_;
  info.description = "recording driver (no GPU; " + arch_ + ", " + (gpu_name_.empty() ? "" : gpu_name_ + ", ") +
                     std::to_string(num_sms_) + " SMs, device " + std::to_string(thread_device) + ")";
  return info;
}

LoadedFunction RecordingDriver::load(const std::vector<uint8_t>& image, const std::string& symbol,
                                     uint32_t, uint32_t) {
  // A real module load takes a while; so does this one, so that tests of concurrent first
  // calls have a window in which a second load would happen if the cache let it.
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::lock_guard<std::mutex> lock(mutex_);
  loaded_.push_back(symbol + " " + to_hex(sha256(image.data(), image.size()).data(), 32));
  loaded_devices_.push_back(thread_device);
  LoadedFunction loaded;
  loaded.module = loaded.function = reinterpret_cast<void*>(uintptr_t(loaded_.size()));
  return loaded;
}

void RecordingDriver::launch(const KernelLaunch& launch) {
  Launch record;
  record.launch = launch;
  record.symbol = *launch.symbol;
  record.args.assign(launch.args, launch.args + launch.args_size);
  record.offsets.assign(launch.arg_offsets, launch.arg_offsets + launch.num_args);
  record.tensormaps.swap(pending_tensormaps);
  record.device = thread_device;
  std::lock_guard<std::mutex> lock(mutex_);
  launches_.push_back(std::move(record));
  if (launches_.size() > kKeptLaunches) launches_.pop_front();
}

void RecordingDriver::encode_tensormap(const TensorMapEncode& encode, void* descriptor) {
  // A recognisable stand-in for the opaque descriptor: its address, then zeros.
  std::memset(descriptor, 0, kTensorMapBytes);
  std::memcpy(descriptor, &encode.address, sizeof(encode.address));
  pending_tensormaps.push_back(encode);
}

std::string RecordingDriver::launches_json() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = "{\"launches\":[";
  for (size_t i = 0; i < launches_.size(); ++i) {
    const Launch& r = launches_[i];
    out += std::string(i ? "," : "") + "{\"symbol\":" + json_string(r.symbol) +
           ",\"device\":" + std::to_string(r.device) +
           ",\"function\":" + std::to_string(uintptr_t(r.launch.function)) +
           ",\"grid\":" + json_numbers(r.launch.grid) + ",\"block\":" + json_numbers(r.launch.block) +
           ",\"cluster\":" + json_numbers(r.launch.cluster) + ",\"shared\":" + std::to_string(r.launch.shared) +
           ",\"stream\":" + std::to_string(uintptr_t(r.launch.stream)) +
           ",\"args\":\"" + to_hex(r.args.data(), r.args.size()) + "\"" +
           ",\"arg_offsets\":" + json_numbers(r.offsets) + ",\"tensormaps\":[";
    for (size_t m = 0; m < r.tensormaps.size(); ++m) out += (m ? "," : "") + tensormap_json(r.tensormaps[m]);
    out += "]}";
  }
  out += "],\"loaded\":[";
  for (size_t i = 0; i < loaded_.size(); ++i) out += (i ? "," : "") + json_string(loaded_[i]);
  std::vector<int64_t> devices(loaded_devices_.begin(), loaded_devices_.end());
  return out + "],\"loaded_devices\":" + json_numbers(devices) + "}";
}

void RecordingDriver::clear_launches() {
  std::lock_guard<std::mutex> lock(mutex_);
  launches_.clear();
}

}  // namespace attnpack
