// A bundle: one opened archive, its kernel plans and selector, and per device context the
// modules loaded so far. Everything a C API call does on a handle goes through here.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "archive.hpp"
#include "driver.hpp"
#include "launch.hpp"
#include "problem.hpp"
#include "select.hpp"

namespace attnpack {

class RecordingDriver;

struct OpenOptions {
  std::string path;       // one file, or empty to search `directory`
  std::string directory;  // empty: default_bundle_directory()
  std::string arch;       // empty: the current device's
  bool recording = false;
};

struct LaunchOptions {
  void* stream = nullptr;
  uint64_t workspace = 0;
  uint64_t workspace_size = 0;
};

class Bundle {
 public:
  explicit Bundle(const OpenOptions& options);  // throws Error
  ~Bundle();

  const Archive& archive() const { return *archive_; }
  const char* driver_name() const;  // "cuda", "hip" or "recording", without loading a driver
  const std::string& compilers_text() const { return compilers_text_; }
  // The archive's by_gpu lists as attnpack_bundle_info version 3 shows them: names (pointing
  // into the archive's records) and entry counts, in the index's order (sorted by name).
  struct GpuModels {
    std::vector<const char*> names;
    std::vector<uint32_t> entries;
  };
  const GpuModels& gpu_models() const { return gpu_models_; }

  // Selection with the device's facts a kernel's requirements name (see with_device_facts).
  Selection select(const Problem& problem, std::vector<std::string>* trace = nullptr) {
    return selector_->select(with_device_facts(problem), trace);
  }
  std::string explain(const Problem& problem);
  uint64_t workspace_size(const Problem& problem);

  // Runs every step of the selected kernel; throws UNSUPPORTED (counted) when none serves it.
  void run(const Problem& problem, const LaunchOptions& options);
  // Loads the kernels of `problems` (every selectable kernel when empty) on this device.
  void preload(const std::vector<Problem>& problems);

  // The raw image of a kernel's step (inflated, sha256-checked), as a first load sees it.
  std::vector<uint8_t> kernel_image(const std::string& kernel, uint32_t step) const;
  void verify_images() const;
  // Throws BAD_LAUNCH_SPEC for the first kernel whose plan has a defect.
  void verify_launch_specs() const;

  std::string stats_json() const;
  void reset_stats();
  // Recording bundles only: JSON of the launches recorded so far, and forgetting them.
  std::string recorded_launches();
  // Recording bundles only: the calling thread's pretend device from now on.
  void set_recording_device(int32_t device);
  void clear_recorded_launches();

 private:
  // One image loaded into one device context, exactly once: concurrent first users wait on
  // `mutex` while the first one loads; afterwards `ready` lets everyone through unlocked.
  struct LoadedImage {
    std::mutex mutex;
    std::atomic<bool> ready{false};
    LoadedFunction function;
  };
  struct DeviceContext {
    ContextKey key = 0;
    DeviceInfo info;
    // The tuning map's by_gpu list whose gpu is info.name (its position), or -1: found once,
    // when the context is first seen, so that no launch compares names.
    int32_t gpu_tuning = -1;
    std::unique_ptr<LoadedImage[]> images;  // per archive image
  };

  Driver& driver();
  RecordingDriver& recording_driver();
  // `problem` with the calling thread's device's facts that selection needs: num_sms when some
  // kernel's requirements name it, and gpu_tuning (the by_gpu list naming the device) when the
  // archive has by_gpu lists. When no device can be asked (e.g. explain for another vendor's
  // archive on a machine without that GPU) num_sms stays 0 (unknown: such requirements fail)
  // and gpu_tuning -1 (the arch-wide entries serve). An archive needing neither asks nothing.
  // `device`, when given, receives the context it asked (null if it asked none), so that a
  // launch looks the context up once.
  Problem with_device_facts(const Problem& problem, DeviceContext** device = nullptr);
  DeviceContext& current_device();
  void* function_for(DeviceContext& device, const StepPlan& step);
  // Selection for a launch, failing UNSUPPORTED where nothing serves; `device` as in
  // with_device_facts.
  Selection select_for_launch(const Problem& problem, DeviceContext** device);

  std::unique_ptr<Archive> archive_;
  std::vector<KernelPlan> plans_;
  std::unique_ptr<Selector> selector_;
  std::string compilers_text_;
  GpuModels gpu_models_;
  std::vector<uint32_t> image_shared_;   // per image: the most dynamic shared memory its steps use
  std::vector<uint32_t> image_cluster_;  // per image: the largest cluster its steps use
  bool requires_num_sms_ = false;         // some kernel's requirements name num_sms

  std::unique_ptr<RecordingDriver> recording_driver_;
  std::atomic<Driver*> driver_{nullptr};  // the real driver, looked up on first need

  std::mutex contexts_mutex_;
  std::vector<std::unique_ptr<DeviceContext>> contexts_;

  std::unique_ptr<std::atomic<uint64_t>[]> calls_;  // per kernel
  std::atomic<uint64_t> modules_loaded_{0};
  mutable std::mutex unsupported_mutex_;
  std::map<std::string, uint64_t> unsupported_;  // per reason
};

}  // namespace attnpack
