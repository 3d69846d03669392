// The CUDA driver API through dlopen("libcuda.so.1").
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "../driver.hpp"
#include "../error.hpp"
#include "cuda_api.hpp"
#include "dynamic_library.hpp"

namespace attnpack {
namespace {

using namespace cu;

class CudaDriver final : public Driver {
 public:
  CudaDriver() : library_({"libcuda.so.1", "libcuda.so"}) {
    if (!library_.loaded()) {
      unusable_ = "no CUDA driver found (" + library_.error() + ")";
      unusable_status_ = ATTNPACK_STATUS_NO_DRIVER;
      return;
    }
    library_.require(init_, "cuInit");
    library_.require(get_error_name_, "cuGetErrorName");
    library_.require(get_error_string_, "cuGetErrorString");
    library_.require(device_get_count_, "cuDeviceGetCount");
    library_.require(device_get_, "cuDeviceGet");
    library_.require(device_get_name_, "cuDeviceGetName");
    library_.require(device_get_attribute_, "cuDeviceGetAttribute");
    library_.require(ctx_get_current_, "cuCtxGetCurrent");
    library_.require(ctx_set_current_, "cuCtxSetCurrent");
    library_.require(ctx_get_device_, "cuCtxGetDevice");
    library_.require(ctx_push_, "cuCtxPushCurrent_v2");
    library_.require(ctx_pop_, "cuCtxPopCurrent_v2");
    library_.require(primary_ctx_retain_, "cuDevicePrimaryCtxRetain");
    library_.require(module_load_data_, "cuModuleLoadData");
    library_.require(module_unload_, "cuModuleUnload");
    library_.require(module_get_function_, "cuModuleGetFunction");
    library_.require(func_set_attribute_, "cuFuncSetAttribute");
    library_.require(launch_kernel_, "cuLaunchKernel");
    if (!library_.missing().empty()) {
      unusable_ = "no usable CUDA driver: " + library_.name() + " lacks " + library_.missing();
      unusable_status_ = ATTNPACK_STATUS_NO_DRIVER;
      return;
    }
    // ATTNPACK_PDL=0 launches every kernel plainly, as before format 2.5 (an A/B switch).
    const char* pdl = std::getenv("ATTNPACK_PDL");
    programmatic_launch_ = !(pdl && std::strcmp(pdl, "0") == 0);
    // Optional: clusters (CUDA 12) and host tensor maps (CUDA 12); checked when used.
    launch_kernel_ex_ = library_.symbol<decltype(launch_kernel_ex_)>("cuLaunchKernelEx");
    tensor_map_encode_tiled_ =
        library_.symbol<decltype(tensor_map_encode_tiled_)>("cuTensorMapEncodeTiled");
    CUresult result = init_(0);
    if (result != CUDA_SUCCESS) {
      unusable_ = "the CUDA driver found no usable device: cuInit failed with " + describe(result);
      unusable_status_ = ATTNPACK_STATUS_NO_DEVICE;
    }
  }

  void require_usable() const {
    if (!unusable_.empty()) fail(unusable_status_, unusable_);
  }

  const char* name() const override { return "cuda"; }

  ContextKey current_context() override {
    CUcontext context = nullptr;
    check(ctx_get_current_(&context), "cuCtxGetCurrent");
    if (!context) {
      // No context on this thread: use device 0's primary context, as the CUDA runtime would.
      CUdevice device = first_device();
      check(primary_ctx_retain_(&context, device), "cuDevicePrimaryCtxRetain");
      check(ctx_set_current_(context), "cuCtxSetCurrent");
    }
    return reinterpret_cast<ContextKey>(context);
  }

  DeviceInfo device_info() override {
    CUcontext context = nullptr;
    check(ctx_get_current_(&context), "cuCtxGetCurrent");
    CUdevice device = 0;
    if (context) {
      check(ctx_get_device_(&device), "cuCtxGetDevice");
    } else {
      device = first_device();
    }
    int major = 0, minor = 0, sms = 0, shared_optin = 0;
    check(device_get_attribute_(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), "cuDeviceGetAttribute");
    check(device_get_attribute_(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), "cuDeviceGetAttribute");
    check(device_get_attribute_(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device), "cuDeviceGetAttribute");
    check(device_get_attribute_(&shared_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device),
          "cuDeviceGetAttribute");
    char device_name[256] = {};
    check(device_get_name_(device_name, sizeof(device_name) - 1, device), "cuDeviceGetName");
    DeviceInfo info;
    info.arch = "sm_" + std::to_string(major) + std::to_string(minor);  // cc 9.0 -> sm_90
    info.name = device_name;
    info.num_sms = sms;
    info.max_shared_per_block = uint32_t(shared_optin);
    info.description = info.name + " (CUDA device " + std::to_string(device) + ", cc " +
                       std::to_string(major) + "." + std::to_string(minor) + ", " +
                       std::to_string(sms) + " SMs)";
    return info;
  }

  LoadedFunction load(const std::vector<uint8_t>& image, const std::string& symbol,
                      uint32_t dynamic_shared, uint32_t cluster_size) override {
    LoadedFunction loaded;
    CUmodule module = nullptr;
    check(module_load_data_(&module, image.data()), "cuModuleLoadData");
    loaded.module = module;
    try {
      CUfunction function = nullptr;
      check(module_get_function_(&function, module, symbol.c_str()), "cuModuleGetFunction(" + symbol + ")");
      if (dynamic_shared > kDefaultDynamicSharedLimit) {
        check(func_set_attribute_(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(dynamic_shared)),
              "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
      }
      if (cluster_size > kPortableClusterSize) {
        check(func_set_attribute_(function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
              "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)");
      }
      loaded.function = function;
    } catch (...) {
      module_unload_(module);
      throw;
    }
    return loaded;
  }

  void unload(ContextKey context, const LoadedFunction& loaded) noexcept override {
    // The module belongs to `context`; errors are ignored (at exit the context may be gone).
    if (ctx_push_(reinterpret_cast<CUcontext>(context)) != CUDA_SUCCESS) return;
    module_unload_(static_cast<CUmodule>(loaded.module));
    CUcontext popped = nullptr;
    ctx_pop_(&popped);
  }

  void launch(const KernelLaunch& launch) override {
    // cuLaunchKernel's kernelParams form: one pointer per parameter into the packed buffer.
    void* params[kMaxKernelParams];
    if (launch.num_args > kMaxKernelParams) {
      fail(ATTNPACK_STATUS_BAD_LAUNCH_SPEC, "kernel " + *launch.symbol + " has too many parameters");
    }
    for (size_t i = 0; i < launch.num_args; ++i) {
      params[i] = const_cast<uint8_t*>(launch.args + launch.arg_offsets[i]);
    }
    auto* function = static_cast<CUfunction>(launch.function);
    auto* stream = static_cast<CUstream>(launch.stream);
    const auto& [gx, gy, gz] = launch.grid;
    const auto& [bx, by, bz] = launch.block;
    const auto& [cx, cy, cz] = launch.cluster;
    const bool clustered = cx * cy * cz != 1;
    // Programmatic launch only lets the kernel start earlier; without cuLaunchKernelEx (before
    // CUDA 12) the plain launch is just as correct.
    const bool programmatic = launch.programmatic && programmatic_launch_ && launch_kernel_ex_;
    if (!clustered && !programmatic) {
      check(launch_kernel_(function, gx, gy, gz, bx, by, bz, launch.shared, stream, params, nullptr),
            "cuLaunchKernel(" + *launch.symbol + ")");
      return;
    }
    if (!launch_kernel_ex_) {
      fail(ATTNPACK_STATUS_DRIVER_ERROR,
           "kernel " + *launch.symbol + " needs thread block clusters, and this CUDA driver has no cuLaunchKernelEx");
    }
    CUlaunchAttribute attributes[3] = {};
    unsigned int count = 0;
    if (clustered) {
      attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attributes[count++].value.clusterDim = {cx, cy, cz};
      attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;  // as Triton launches
      attributes[count++].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
    }
    if (programmatic) {
      // The kernel's blocks may start while the grid ahead in the stream drains; each waits for
      // that grid to end (griddepcontrol.wait) before it touches memory.
      attributes[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attributes[count++].value.programmaticStreamSerializationAllowed = 1;
    }
    CUlaunchConfig config = {};
    config.gridDimX = gx;
    config.gridDimY = gy;
    config.gridDimZ = gz;
    config.blockDimX = bx;
    config.blockDimY = by;
    config.blockDimZ = bz;
    config.sharedMemBytes = launch.shared;
    config.hStream = stream;
    config.attrs = attributes;
    config.numAttrs = count;
    check(launch_kernel_ex_(&config, function, params, nullptr), "cuLaunchKernelEx(" + *launch.symbol + ")");
  }

  void encode_tensormap(const TensorMapEncode& e, void* descriptor) override {
    if (!tensor_map_encode_tiled_) {
      fail(ATTNPACK_STATUS_DRIVER_ERROR, "this CUDA driver has no cuTensorMapEncodeTiled (needs CUDA 12)");
    }
    // Encoded in an aligned local, then copied to its (64-byte aligned) argument slot.
    CUtensorMap map;
    check(tensor_map_encode_tiled_(&map, int(e.data_type), e.rank, reinterpret_cast<void*>(e.address),
                                   e.dims, e.strides, e.box, e.element_strides, int(e.interleave),
                                   int(e.swizzle), int(e.l2_promotion), int(e.oob_fill)),
          "cuTensorMapEncodeTiled");
    std::memcpy(descriptor, &map, sizeof(map));
  }

 private:
  static constexpr size_t kMaxKernelParams = 512;

  std::string describe(CUresult result) const {
    const char* name = nullptr;
    const char* text = nullptr;
    if (get_error_name_) get_error_name_(result, &name);
    if (get_error_string_) get_error_string_(result, &text);
    return std::string(name ? name : "CUDA error " + std::to_string(result)) + " (" +
           (text ? text : "no description") + ")";
  }

  void check(CUresult result, const std::string& call) const {
    if (result != CUDA_SUCCESS) fail(ATTNPACK_STATUS_DRIVER_ERROR, call + " failed: " + describe(result));
  }

  CUdevice first_device() const {
    int count = 0;
    check(device_get_count_(&count), "cuDeviceGetCount");
    if (count == 0) fail(ATTNPACK_STATUS_NO_DEVICE, "the CUDA driver reports no device");
    CUdevice device = 0;
    check(device_get_(&device, 0), "cuDeviceGet");
    return device;
  }

  DynamicLibrary library_;
  std::string unusable_;
  attnpack_status unusable_status_ = ATTNPACK_STATUS_OK;
  bool programmatic_launch_ = true;  // steps with `pdl` launch programmatically

  CUresult (*init_)(unsigned int) = nullptr;
  CUresult (*get_error_name_)(CUresult, const char**) = nullptr;
  CUresult (*get_error_string_)(CUresult, const char**) = nullptr;
  CUresult (*device_get_count_)(int*) = nullptr;
  CUresult (*device_get_)(CUdevice*, int) = nullptr;
  CUresult (*device_get_name_)(char*, int, CUdevice) = nullptr;
  CUresult (*device_get_attribute_)(int*, int, CUdevice) = nullptr;
  CUresult (*ctx_get_current_)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current_)(CUcontext) = nullptr;
  CUresult (*ctx_get_device_)(CUdevice*) = nullptr;
  CUresult (*ctx_push_)(CUcontext) = nullptr;
  CUresult (*ctx_pop_)(CUcontext*) = nullptr;
  CUresult (*primary_ctx_retain_)(CUcontext*, CUdevice) = nullptr;
  CUresult (*module_load_data_)(CUmodule*, const void*) = nullptr;
  CUresult (*module_unload_)(CUmodule) = nullptr;
  CUresult (*module_get_function_)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*func_set_attribute_)(CUfunction, int, int) = nullptr;
  CUresult (*launch_kernel_)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*launch_kernel_ex_)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;
  CUresult (*tensor_map_encode_tiled_)(CUtensorMap*, int, uint32_t, void*, const uint64_t*,
                                       const uint64_t*, const uint32_t*, const uint32_t*, int, int,
                                       int, int) = nullptr;
};

}  // namespace

Driver& cuda_driver() {
  // Never destroyed: a launch may still be in flight while static destructors run at exit.
  static CudaDriver* driver = new CudaDriver();
  driver->require_usable();
  return *driver;
}

}  // namespace attnpack
