// HIP's module API through dlopen("libamdhip64.so"). Every launch passes its arguments as one
// packed buffer (HIP_LAUNCH_PARAM_BUFFER_POINTER/SIZE): AITER's assembly kernels need that
// form, and one form for all kernels keeps one path tested.
#include <cstring>
#include <string>

#include "../driver.hpp"
#include "../error.hpp"
#include "dynamic_library.hpp"
#include "hip_api.hpp"

namespace attnpack {
namespace {

using namespace hip;

class HipDriver final : public Driver {
 public:
  HipDriver() : library_({"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6"}) {
    if (!library_.loaded()) {
      unusable_ = "no HIP driver found (" + library_.error() + ")";
      unusable_status_ = ATTNPACK_STATUS_NO_DRIVER;
      return;
    }
    library_.require(driver_get_version_, "hipDriverGetVersion");
    library_.require(init_, "hipInit");
    library_.require(get_error_string_, "hipGetErrorString");
    library_.require(get_device_count_, "hipGetDeviceCount");
    library_.require(get_device_, "hipGetDevice");
    library_.require(set_device_, "hipSetDevice");
    library_.require(device_get_attribute_, "hipDeviceGetAttribute");
    library_.require(get_device_properties_, "hipGetDevicePropertiesR0600");
    library_.require(module_load_data_, "hipModuleLoadData");
    library_.require(module_unload_, "hipModuleUnload");
    library_.require(module_get_function_, "hipModuleGetFunction");
    library_.require(module_launch_kernel_, "hipModuleLaunchKernel");
    if (!library_.missing().empty()) {
      unusable_ = "no usable HIP driver: " + library_.name() + " lacks " + library_.missing();
      unusable_status_ = ATTNPACK_STATUS_NO_DRIVER;
      return;
    }
    int version = 0;
    driver_get_version_(&version);  // major * 10000000 + minor * 100000 + patch
    if (version / 10000000 < kMinimumMajorVersion) {
      unusable_ = "no usable HIP driver: " + library_.name() + " is HIP " +
                  std::to_string(version / 10000000) + "." + std::to_string(version / 100000 % 100) +
                  "; attnpack needs HIP 6 or newer";
      unusable_status_ = ATTNPACK_STATUS_NO_DRIVER;
      return;
    }
    hipError_t result = init_(0);
    int count = 0;
    if (result == hipSuccess) result = get_device_count_(&count);
    if (result != hipSuccess || count == 0) {
      unusable_ = "the HIP driver found no device" + (result != hipSuccess ? " (" + describe(result) + ")" : "");
      unusable_status_ = ATTNPACK_STATUS_NO_DEVICE;
    }
  }

  void require_usable() const {
    if (!unusable_.empty()) fail(unusable_status_, unusable_);
  }

  const char* name() const override { return "hip"; }

  ContextKey current_context() override {
    int device = 0;
    check(get_device_(&device), "hipGetDevice");
    return ContextKey(device) + 1;  // modules live per device; +1 keeps 0 free as "none"
  }

  DeviceInfo device_info() override {
    int device = 0;
    check(get_device_(&device), "hipGetDevice");
    // hipDeviceProp_tR0600 is large and changes across releases; only name and gcnArchName
    // are read, at their HIP 6 offsets, from a zeroed buffer with room to spare.
    alignas(16) char properties[kDevicePropR0600Size + 4096] = {};
    check(get_device_properties_(properties, device), "hipGetDevicePropertiesR0600");
    std::string arch(properties + kGcnArchNameOffset, strnlen(properties + kGcnArchNameOffset, kGcnArchNameSize));
    arch = arch.substr(0, arch.find(':'));  // "gfx942:sramecc+:xnack-" -> "gfx942"
    int sms = 0, shared_optin = 0;
    check(device_get_attribute_(&sms, hipDeviceAttributeMultiprocessorCount, device), "hipDeviceGetAttribute");
    check(device_get_attribute_(&shared_optin, hipDeviceAttributeSharedMemPerBlockOptin, device),
          "hipDeviceGetAttribute");
    DeviceInfo info;
    info.arch = arch;
    info.name = std::string(properties + kNameOffset, strnlen(properties + kNameOffset, kNameSize));
    info.num_sms = sms;
    info.max_shared_per_block = uint32_t(shared_optin);
    info.description = info.name + " (HIP device " + std::to_string(device) + ", " + arch +
                       ", " + std::to_string(sms) + " CUs)";
    return info;
  }

  LoadedFunction load(const std::vector<uint8_t>& image, const std::string& symbol, uint32_t,
                      uint32_t) override {
    LoadedFunction loaded;
    hipModule_t module = nullptr;
    check(module_load_data_(&module, image.data()), "hipModuleLoadData");
    hipFunction_t function = nullptr;
    hipError_t result = module_get_function_(&function, module, symbol.c_str());
    if (result != hipSuccess) {
      module_unload_(module);
      check(result, "hipModuleGetFunction(" + symbol + ")");
    }
    loaded.module = module;
    loaded.function = function;
    return loaded;
  }

  void unload(ContextKey context, const LoadedFunction& loaded) noexcept override {
    int previous = 0;
    if (get_device_(&previous) != hipSuccess) return;
    set_device_(int(context - 1));
    module_unload_(static_cast<hipModule_t>(loaded.module));
    set_device_(previous);
  }

  void launch(const KernelLaunch& launch) override {
    size_t size = launch.args_size;
    void* extra[] = {reinterpret_cast<void*>(kLaunchParamBufferPointer), const_cast<uint8_t*>(launch.args),
                     reinterpret_cast<void*>(kLaunchParamBufferSize), &size,
                     reinterpret_cast<void*>(kLaunchParamEnd)};
    const auto& [gx, gy, gz] = launch.grid;
    const auto& [bx, by, bz] = launch.block;
    check(module_launch_kernel_(static_cast<hipFunction_t>(launch.function), gx, gy, gz, bx, by, bz,
                                launch.shared, static_cast<hipStream_t>(launch.stream), nullptr, extra),
          "hipModuleLaunchKernel(" + *launch.symbol + ")");
  }

  void encode_tensormap(const TensorMapEncode&, void*) override {
    fail(ATTNPACK_STATUS_BAD_LAUNCH_SPEC, "tensor maps are CUDA-only");
  }

 private:
  std::string describe(hipError_t result) const {
    const char* text = get_error_string_ ? get_error_string_(result) : nullptr;
    return "HIP error " + std::to_string(result) + (text ? std::string(" (") + text + ")" : "");
  }

  void check(hipError_t result, const std::string& call) const {
    if (result != hipSuccess) fail(ATTNPACK_STATUS_DRIVER_ERROR, call + " failed: " + describe(result));
  }

  DynamicLibrary library_;
  std::string unusable_;
  attnpack_status unusable_status_ = ATTNPACK_STATUS_OK;

  hipError_t (*driver_get_version_)(int*) = nullptr;
  hipError_t (*init_)(unsigned int) = nullptr;
  const char* (*get_error_string_)(hipError_t) = nullptr;
  hipError_t (*get_device_count_)(int*) = nullptr;
  hipError_t (*get_device_)(int*) = nullptr;
  hipError_t (*set_device_)(int) = nullptr;
  hipError_t (*device_get_attribute_)(int*, int, int) = nullptr;
  hipError_t (*get_device_properties_)(void*, int) = nullptr;
  hipError_t (*module_load_data_)(hipModule_t*, const void*) = nullptr;
  hipError_t (*module_unload_)(hipModule_t) = nullptr;
  hipError_t (*module_get_function_)(hipFunction_t*, hipModule_t, const char*) = nullptr;
  hipError_t (*module_launch_kernel_)(hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, unsigned, hipStream_t, void**, void**) = nullptr;
};

}  // namespace

Driver& hip_driver() {
  static HipDriver* driver = new HipDriver();  // never destroyed, like the CUDA driver
  driver->require_usable();
  return *driver;
}

}  // namespace attnpack
