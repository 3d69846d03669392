#include "bundle.hpp"

#include <algorithm>

#include "drivers/recording_driver.hpp"
#include "error.hpp"
#include "json.hpp"
#include "locate.hpp"

namespace attnpack {
namespace {

std::string grid_formula(const StepPlan& step, const Problem& problem, bool sizes_known) {
  std::string out = "[";
  for (int d = 0; d < 3; ++d) {
    std::string dim;
    for (const auto& [size, divisor] : step.grid[d]) {
      if (!dim.empty()) dim += "*";
      dim += divisor == 1 ? std::string(kSizeWords[size])
                          : "ceil(" + std::string(kSizeWords[size]) + "/" + std::to_string(divisor) + ")";
    }
    out += (d ? ", " : "") + (dim.empty() ? "1" : dim);
  }
  out += "]";
  if (sizes_known) out += " = " + json_numbers(program_grid(step, problem));
  return out;
}

}  // namespace

Bundle::Bundle(const OpenOptions& options) {
  std::string expected_arch = options.arch, device;
  auto ask_the_device = [&] {
    DeviceInfo info = detect_current_device();
    expected_arch = info.arch;
    device = info.description;
  };
  std::string path = options.path;
  if (path.empty()) {
    if (expected_arch.empty()) {
      if (options.recording) {
        fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "a recording bundle needs an arch or a path");
      }
      ask_the_device();
    }
    path = find_archive(options.directory.empty() ? default_bundle_directory() : options.directory,
                        expected_arch);
  }
  archive_ = std::make_unique<Archive>(path);
  if (expected_arch.empty() && !options.recording) ask_the_device();
  if (!expected_arch.empty() && expected_arch != archive_->arch()) {
    fail(ATTNPACK_STATUS_ARCH_MISMATCH,
         "archive " + path + " targets " + archive_->arch() + " but " +
             (device.empty() ? expected_arch + " was asked for" : "the device is " + device) +
             " — use an attnpack-*-" + expected_arch + ".apk archive");
  }
  if (options.recording) {
    recording_driver_ = std::make_unique<RecordingDriver>(archive_->arch(), archive_->target().shared_bytes);
  }

  const std::vector<KernelRecord>& kernels = archive_->kernels();
  plans_.reserve(kernels.size());
  for (const KernelRecord& kernel : kernels) {
    plans_.push_back(plan_kernel(*archive_, kernel));
    requires_num_sms_ |= plans_.back().requires_num_sms;
  }
  selector_ = std::make_unique<Selector>(*archive_, plans_);
  image_shared_.assign(archive_->images().size(), 0);
  image_cluster_.assign(archive_->images().size(), 1);
  for (const KernelRecord& kernel : kernels) {
    for (const StepRecord& step : kernel.steps) {
      image_shared_[step.image] = std::max(image_shared_[step.image], step.shared);
      image_cluster_[step.image] =
          std::max(image_cluster_[step.image], step.cluster[0] * step.cluster[1] * step.cluster[2]);
    }
  }
  for (const auto& [name, version] : archive_->compilers()) {
    compilers_text_ += (compilers_text_.empty() ? "" : ",") + name + "=" + version;
  }
  for (const GpuTuning& gpu : archive_->tuning().by_gpu) {
    gpu_models_.names.push_back(gpu.gpu.c_str());
    gpu_models_.entries.push_back(uint32_t(gpu.entries.size()));
  }
  calls_.reset(new std::atomic<uint64_t>[kernels.size()]());
}

Bundle::~Bundle() {
  Driver* driver = recording_driver_ ? recording_driver_.get() : driver_.load();
  if (!driver) return;  // nothing was ever loaded
  for (const auto& device : contexts_) {
    for (size_t i = 0; i < archive_->images().size(); ++i) {
      if (device->images[i].ready) driver->unload(device->key, device->images[i].function);
    }
  }
}

const char* Bundle::driver_name() const {
  if (recording_driver_) return "recording";
  return archive_->target().vendor == Vendor::Amd ? "hip" : "cuda";
}

Driver& Bundle::driver() {
  if (recording_driver_) return *recording_driver_;
  Driver* driver = driver_.load(std::memory_order_acquire);
  if (!driver) {
    driver = &driver_for(archive_->target().vendor);  // throws NO_DRIVER with the loader's words
    driver_.store(driver, std::memory_order_release);
  }
  return *driver;
}

Bundle::DeviceContext& Bundle::current_device() {
  Driver& gpu = driver();
  const ContextKey key = gpu.current_context();
  std::lock_guard<std::mutex> lock(contexts_mutex_);
  for (const auto& device : contexts_) {
    if (device->key == key) return *device;
  }
  auto device = std::make_unique<DeviceContext>();
  device->key = key;
  device->info = gpu.device_info();
  if (device->info.arch != archive_->arch()) {
    fail(ATTNPACK_STATUS_ARCH_MISMATCH,
         "archive " + archive_->path() + " targets " + archive_->arch() + " but this thread's device is " +
             device->info.description + " — open an attnpack-*-" + device->info.arch + ".apk archive for it");
  }
  const std::vector<GpuTuning>& by_gpu = archive_->tuning().by_gpu;
  for (size_t i = 0; i < by_gpu.size(); ++i) {
    if (by_gpu[i].gpu == device->info.name) {  // names are distinct and never empty (archive.cpp)
      device->gpu_tuning = int32_t(i);
      break;
    }
  }
  device->images.reset(new LoadedImage[archive_->images().size()]);
  contexts_.push_back(std::move(device));
  return *contexts_.back();
}

void* Bundle::function_for(DeviceContext& device, const StepPlan& step) {
  const uint32_t image = step.record->image;
  LoadedImage& slot = device.images[image];
  if (!slot.ready.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(slot.mutex);
    if (!slot.ready.load(std::memory_order_relaxed)) {
      if (image_shared_[image] > device.info.max_shared_per_block) {
        fail(ATTNPACK_STATUS_BAD_LAUNCH_SPEC,
             archive_->describe("image " + std::to_string(image) + " (" + step.record->symbol + ") needs " +
                                std::to_string(image_shared_[image]) + " bytes of shared memory; " +
                                device.info.description + " allows " +
                                std::to_string(device.info.max_shared_per_block)));
      }
      std::vector<uint8_t> bytes = archive_->image_bytes(image);  // inflate + sha256 check
      try {
        slot.function = driver().load(bytes, step.record->symbol, image_shared_[image], image_cluster_[image]);
      } catch (const Error& e) {
        fail(e.status(), archive_->describe("loading image " + std::to_string(image) + " (" +
                                            step.record->symbol + "): " + e.what()));
      }
      modules_loaded_.fetch_add(1, std::memory_order_relaxed);
      slot.ready.store(true, std::memory_order_release);
    }
  }
  return slot.function.function;
}

Problem Bundle::with_device_facts(const Problem& input, DeviceContext** found) {
  Problem problem = input;
  if (found) *found = nullptr;
  const bool wants_num_sms = requires_num_sms_ && problem.sizes[kNumSms] == 0;
  const bool wants_gpu_tuning = !archive_->tuning().by_gpu.empty() && !problem.kernel;  // a forced name is not tuned
  if (!wants_num_sms && !wants_gpu_tuning) return problem;
  try {
    DeviceContext& device = current_device();
    if (wants_num_sms) problem.sizes[kNumSms] = device.info.num_sms;
    problem.gpu_tuning = device.gpu_tuning;
    if (found) *found = &device;
  } catch (const Error&) {
    // No driver or device here (or another arch's): the count is unknown and the arch-wide
    // entries serve. A launch asks again and fails with the driver's own words if it gets
    // that far.
  }
  return problem;
}

Selection Bundle::select_for_launch(const Problem& problem, DeviceContext** device) {
  Selection selection = selector_->select(with_device_facts(problem, device));
  if (!selection.plan) {
    {
      std::lock_guard<std::mutex> lock(unsupported_mutex_);
      ++unsupported_[selection.unsupported_reason];
    }
    fail(ATTNPACK_STATUS_UNSUPPORTED, selection.unsupported_reason);
  }
  return selection;
}

void Bundle::run(const Problem& input, const LaunchOptions& options) {
  DeviceContext* found = nullptr;
  const Selection selection = select_for_launch(input, &found);
  const KernelPlan& plan = *selection.plan;
  for (int t = 0; t < kNumTensors; ++t) {
    if (plan.uses_tensor[t] && input.tensors[t].address == 0) {
      fail(ATTNPACK_STATUS_INVALID_ARGUMENT, std::string(kTensorWords[t]) + " is NULL");
    }
  }
  if (plan.uses_lse && input.lse == 0) fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "lse is NULL");

  DeviceContext& device = found ? *found : current_device();  // the driver's own error if none
  Problem problem = input;
  problem.sizes[kNumSms] = device.info.num_sms;
  // A batch past the grid limits runs as slices of `per_launch` (the last one shorter), one
  // after another on the stream, sharing the workspace the first (largest) one needs.
  const int64_t batch = problem.sizes[kB], per_launch = selection.batch_per_launch;
  const WorkspaceLayout layout = layout_workspace(plan, batch_slice(problem, 0, per_launch));
  if (layout.total > 0) {
    if (options.workspace == 0 || options.workspace_size < layout.total) {
      fail(ATTNPACK_STATUS_INVALID_ARGUMENT,
           "the workspace is " + std::to_string(options.workspace ? options.workspace_size : 0) +
               " bytes; " + plan.record->name + " needs " + std::to_string(layout.total) +
               " for this problem (attnpack_workspace_size)");
    }
    if (options.workspace % kWorkspaceAlign != 0) {
      fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "the workspace is not 256-byte aligned");
    }
  }
  LaunchBuffers buffers;
  for (uint64_t offset : layout.buffer_offsets) buffers.workspace.push_back(options.workspace + offset);

  Driver& gpu = driver();
  alignas(kTensorMapAlign) uint8_t arguments[kMaxKernargBytes];
  for (int64_t b0 = 0; b0 < batch; b0 += per_launch) {
    const Problem slice = per_launch == batch ? problem : batch_slice(problem, b0, std::min(per_launch, batch - b0));
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const StepPlan& step = plan.steps[i];
      const WorkspaceLayout::Scratch& scratch = layout.step_scratch[i];
      buffers.global_scratch = scratch.global ? options.workspace + scratch.global_offset : 0;
      buffers.profile_scratch = scratch.profile ? options.workspace + scratch.profile_offset : 0;
      KernelLaunch launch;
      launch.function = function_for(device, step);
      launch.symbol = &step.record->symbol;
      launch.grid = program_grid(step, slice);
      for (int d = 0; d < 3; ++d) launch.grid[d] *= step.record->cluster[d];  // blocks, as Triton launches
      launch.block = step.record->block;
      launch.cluster = step.record->cluster;
      launch.shared = step.record->shared;
      launch.stream = options.stream;
      launch.programmatic = step.record->pdl;
      pack_arguments(step, plan, slice, buffers, gpu, arguments);
      launch.args = arguments;
      launch.args_size = step.packed_size;
      launch.arg_offsets = step.offsets.data();
      launch.num_args = step.offsets.size();
      gpu.launch(launch);
    }
  }
  calls_[plan.record - archive_->kernels().data()].fetch_add(1, std::memory_order_relaxed);
}

uint64_t Bundle::workspace_size(const Problem& input) {
  DeviceContext* found = nullptr;
  Selection selection = selector_->select(with_device_facts(input, &found));
  if (!selection.plan) fail(ATTNPACK_STATUS_UNSUPPORTED, selection.unsupported_reason);
  Problem problem = input;
  if (selection.plan->workspace_needs_num_sms) {
    problem.sizes[kNumSms] = (found ? *found : current_device()).info.num_sms;
  }
  return layout_workspace(*selection.plan, batch_slice(problem, 0, selection.batch_per_launch)).total;
}

void Bundle::preload(const std::vector<Problem>& problems) {
  std::vector<const KernelPlan*> wanted;
  DeviceContext* device = nullptr;
  if (problems.empty()) {
    // the whole table as this device selects from it: its own GPU model's entries, not others'
    device = &current_device();
    for (uint32_t kernel : selector_->selectable_kernels(device->gpu_tuning)) {
      if (plans_[kernel].defect.empty()) wanted.push_back(&plans_[kernel]);
    }
  }
  for (const Problem& problem : problems) {
    DeviceContext* found = nullptr;
    Selection selection = selector_->select(with_device_facts(problem, &found));
    if (found) device = found;
    if (selection.plan) wanted.push_back(selection.plan);  // unsupported ones will fall back
  }
  if (wanted.empty()) return;
  if (!device) device = &current_device();
  for (const KernelPlan* plan : wanted) {
    for (const StepPlan& step : plan->steps) function_for(*device, step);
  }
}

std::string Bundle::explain(const Problem& input) {
  const Problem problem = with_device_facts(input);
  std::vector<std::string> trace;
  std::string out = "problem: " + describe(problem) + "\n";
  out += "archive: " + archive_->path() + " (" + archive_->arch() + ", bundle " +
         archive_->bundle_version() + ", format " + std::to_string(archive_->format_major()) + "." +
         std::to_string(archive_->format_minor()) + ", " + compilers_text_ + ")\n";
  Selection selection = selector_->select(problem, &trace);
  for (const std::string& line : trace) out += "  " + line + "\n";
  if (!selection.plan) return out + "not served: " + selection.unsupported_reason + "\n";
  const KernelPlan& plan = *selection.plan;
  const KernelRecord& kernel = *plan.record;
  out += "kernel: " + kernel.name + " (family " + kernel.family + (kernel.config.empty() ? "" : ", " + kernel.config) + ")\n";
  switch (selection.origin) {
    case Origin::Forced: out += "served by: forced name (attnpack_problem.kernel)\n"; break;
    case Origin::Tuned: out += "served by: tuned entry\n"; break;
    case Origin::TunedForGpu:
      out += "served by: tuned entry for " + archive_->tuning().by_gpu[problem.gpu_tuning].gpu + "\n";
      break;
    case Origin::Nearest: out += "served by: nearest tuned entry\n"; break;
    case Origin::Default: out += "served by: default\n"; break;
  }
  const int64_t batch = problem.sizes[kB], per_launch = selection.batch_per_launch;
  if (per_launch < batch) {
    out += "batch: B=" + std::to_string(batch) + " past the grid limits, launched as " +
           std::to_string((batch + per_launch - 1) / per_launch) + " slices of up to " + std::to_string(per_launch) + "\n";
  }
  const Problem first = batch_slice(problem, 0, per_launch);  // what each step's grid below is
  // Grids over num_sms need the device, which explain asks only for kernels' requirements.
  bool sizes_known = true;
  for (const StepPlan& step : plan.steps) sizes_known &= !step.grid_uses_num_sms || problem.sizes[kNumSms] != 0;
  sizes_known &= !plan.workspace_needs_num_sms || problem.sizes[kNumSms] != 0;
  for (const StepPlan& step : plan.steps) {
    const StepRecord& record = *step.record;
    out += "  step " + record.name + ": " + record.symbol + " grid " + grid_formula(step, first, sizes_known) +
           " block " + json_numbers(record.block) + " cluster " + json_numbers(record.cluster) + " shared " +
           std::to_string(record.shared) + " B, " + std::to_string(step.params.size()) + " params (" +
           std::to_string(step.packed_size) + " B)";
    if (record.pdl) out += ", programmatic launch";
    if (record.scratch.global_size || record.scratch.profile_size) {
      out += ", scratch " + std::to_string(record.scratch.global_size) + "+" +
             std::to_string(record.scratch.profile_size) + " B per block";
    }
    out += "\n";
  }
  if (!plan.workspace_shapes.empty() || !sizes_known) {
    std::string names;
    for (const WorkspaceRecord& buffer : kernel.workspace) names += (names.empty() ? "" : ", ") + buffer.name;
    out += "workspace: " + (names.empty() ? std::string("scratch only") : names);
    if (sizes_known) out += ", " + std::to_string(layout_workspace(plan, first).total) + " bytes";
    out += "\n";
  }
  return out;
}

std::vector<uint8_t> Bundle::kernel_image(const std::string& name, uint32_t step) const {
  std::optional<uint32_t> index = archive_->kernel_index(name);
  if (!index) fail(ATTNPACK_STATUS_INVALID_ARGUMENT, archive_->describe("has no kernel " + name));
  const KernelRecord& kernel = archive_->kernels()[*index];
  if (step >= kernel.steps.size()) {
    fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "kernel " + name + " has " + std::to_string(kernel.steps.size()) +
                                               " steps; there is no step " + std::to_string(step));
  }
  return archive_->image_bytes(kernel.steps[step].image);
}

void Bundle::verify_images() const {
  for (uint32_t i = 0; i < archive_->images().size(); ++i) archive_->image_bytes(i);
}

void Bundle::verify_launch_specs() const {
  for (const KernelPlan& plan : plans_) {
    if (!plan.defect.empty()) {
      fail(ATTNPACK_STATUS_BAD_LAUNCH_SPEC, archive_->describe("kernel " + plan.record->name + " " + plan.defect));
    }
  }
}

std::string Bundle::stats_json() const {
  std::string calls;
  for (size_t k = 0; k < archive_->kernels().size(); ++k) {
    uint64_t count = calls_[k].load(std::memory_order_relaxed);
    if (count) calls += (calls.empty() ? "" : ",") + json_string(archive_->kernels()[k].name) + ":" + std::to_string(count);
  }
  std::string unsupported;
  {
    std::lock_guard<std::mutex> lock(unsupported_mutex_);
    for (const auto& [reason, count] : unsupported_) {
      unsupported += (unsupported.empty() ? "" : ",") + json_string(reason) + ":" + std::to_string(count);
    }
  }
  return "{\"calls\":{" + calls + "},\"unsupported\":{" + unsupported +
         "},\"modules_loaded\":" + std::to_string(modules_loaded_.load()) + "}";
}

void Bundle::reset_stats() {
  for (size_t k = 0; k < archive_->kernels().size(); ++k) calls_[k].store(0);
  std::lock_guard<std::mutex> lock(unsupported_mutex_);
  unsupported_.clear();
}

RecordingDriver& Bundle::recording_driver() {
  if (!recording_driver_) {
    fail(ATTNPACK_STATUS_INVALID_ARGUMENT,
         "launches are recorded only by a bundle opened with ATTNPACK_OPEN_RECORDING_DRIVER");
  }
  return *recording_driver_;
}

std::string Bundle::recorded_launches() { return recording_driver().launches_json(); }
void Bundle::clear_recorded_launches() { recording_driver().clear_launches(); }

void Bundle::set_recording_device(int32_t device) {
  recording_driver();  // INVALID_ARGUMENT for a bundle on a real driver
  if (device < 0) fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "device " + std::to_string(device) + " is negative");
  RecordingDriver::set_thread_device(device);
}

}  // namespace attnpack
