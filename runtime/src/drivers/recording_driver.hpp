// A driver for tests and benchmarks: it loads nothing onto a GPU and launches nothing; it
// records each launch (grid, block, cluster, shared memory, the packed argument bytes and the
// tensor maps encoded for it). With it the whole launch path runs on a machine without a GPU.
// It pretends to have any number of devices of one arch: each thread has a current device
// (0 until set_thread_device), and each device is its own context, as on a multi-GPU machine.
// Each has 132 multiprocessors (an H200), or $ATTNPACK_RECORDING_NUM_SMS as the bundle is
// opened (a 304-CU MI300X, say, for kernels that require a CU count). Its name is
// $ATTNPACK_RECORDING_GPU_NAME as the bundle is opened ("NVIDIA H100 80GB HBM3", say, to
// select by the tuning map's by_gpu list of that name); unset or empty, it is "", which no
// by_gpu list names.
#pragma once

#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "../driver.hpp"

namespace attnpack {

class RecordingDriver final : public Driver {
 public:
  static constexpr int64_t kNumSms = 132;  // it pretends to be an H200
  static constexpr const char* kNumSmsVariable = "ATTNPACK_RECORDING_NUM_SMS";
  static constexpr const char* kGpuNameVariable = "ATTNPACK_RECORDING_GPU_NAME";
  static constexpr size_t kKeptLaunches = 256;

  // `max_shared` is the target's shared memory / LDS per block, from the archive's meta.
  // Throws INVALID_ARGUMENT when $ATTNPACK_RECORDING_NUM_SMS is set but not a count.
  RecordingDriver(std::string arch, uint32_t max_shared);

  const char* name() const override { return "recording"; }
  // The calling thread's pretend device, for every recording driver (cudaSetDevice's analogue).
  static void set_thread_device(int32_t device);
  ContextKey current_context() override;
  DeviceInfo device_info() override;
  LoadedFunction load(const std::vector<uint8_t>& image, const std::string& symbol,
                      uint32_t dynamic_shared, uint32_t cluster_size) override;
  void unload(ContextKey, const LoadedFunction&) noexcept override {}
  void launch(const KernelLaunch& launch) override;
  void encode_tensormap(const TensorMapEncode& encode, void* descriptor) override;

  // {"launches": [...oldest first, each with its "device"], "loaded": ["symbol sha256", ...],
  //  "loaded_devices": [the device of each load]}; a launch's "function" is 1 + its load's index.
  std::string launches_json();
  void clear_launches();

 private:
  // Kept raw and formatted only when asked, so that recording costs little next to the
  // runtime's own work (benchmarks time launches through this driver).
  struct Launch {
    KernelLaunch launch;  // only its scalar fields are read; the pointed-to data is copied below
    std::string symbol;
    std::vector<uint8_t> args;
    std::vector<uint32_t> offsets;
    std::vector<TensorMapEncode> tensormaps;
    int32_t device = 0;
  };

  std::string arch_;
  uint32_t max_shared_ = 0;
  int64_t num_sms_ = kNumSms;
  std::string gpu_name_;  // $ATTNPACK_RECORDING_GPU_NAME at construction; "" when unset
  std::mutex mutex_;
  std::deque<Launch> launches_;
  std::vector<std::string> loaded_;  // "symbol sha256" per module load
  std::vector<int32_t> loaded_devices_;  // the device of each load
};

}  // namespace attnpack
