// What the runtime needs from a GPU driver, and the drivers that provide it.
//
// The CUDA driver API (libcuda.so.1) and HIP (libamdhip64.so) are reached through dlopen, so
// libattnpack builds with no toolkit and loads on a machine with no GPU; only a call that
// needs a device fails, with NO_DRIVER / NO_DEVICE and the loader's own words.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "target.hpp"

namespace attnpack {

// Identifies where modules live: a CUcontext for CUDA, a device ordinal for HIP.
using ContextKey = uintptr_t;

struct DeviceInfo {
  std::string arch;                 // "sm_90", "gfx942"
  // The device's name as its driver reports it (cuDeviceGetName, hipDeviceProp_t.name):
  // "NVIDIA H100 80GB HBM3". Matched exactly against the tuning map's by_gpu lists.
  std::string name;
  std::string description;          // "NVIDIA H200 (cc 9.0, 132 SMs)"
  int64_t num_sms = 0;              // multiprocessors / compute units
  uint32_t max_shared_per_block = 0;  // opt-in dynamic shared memory limit, bytes
};

struct LoadedFunction {
  void* module = nullptr;
  void* function = nullptr;
};

// Arguments of cuTensorMapEncodeTiled, innermost dimension first (the driver's order).
struct TensorMapEncode {
  uint32_t data_type = 0;  // CUtensorMapDataType
  uint32_t rank = 0;
  uint64_t address = 0;
  uint64_t dims[5] = {};
  uint64_t strides[4] = {};  // bytes, of dims 1..rank-1
  uint32_t box[5] = {};
  uint32_t element_strides[5] = {};
  uint32_t interleave = 0, swizzle = 0, l2_promotion = 0, oob_fill = 0;
};

constexpr size_t kTensorMapBytes = 128;  // sizeof(CUtensorMap), passed by value
constexpr size_t kTensorMapAlign = 64;   // cuTensorMapEncodeTiled writes to 64-byte aligned memory

struct KernelLaunch {
  void* function = nullptr;
  const std::string* symbol = nullptr;
  std::array<uint32_t, 3> grid{}, block{}, cluster{};  // grid in blocks (cluster included)
  uint32_t shared = 0;
  void* stream = nullptr;
  const uint8_t* args = nullptr;  // packed with natural alignment
  size_t args_size = 0;
  const uint32_t* arg_offsets = nullptr;  // where each parameter starts in `args`
  size_t num_args = 0;
  // The kernel waits for the grid ahead in the stream itself (griddepcontrol.wait), so it may be
  // launched with programmatic stream serialization (the step's `pdl`).
  bool programmatic = false;
};

class Driver {
 public:
  virtual ~Driver() = default;
  virtual const char* name() const = 0;  // "cuda", "hip", "recording"

  // Where the calling thread launches. CUDA: its current context, else device 0's primary
  // context made current (what the CUDA runtime does on first use).
  virtual ContextKey current_context() = 0;
  // The device of the calling thread's current context (device 0 when none is current);
  // creates no context. Throws NO_DEVICE when there is no device.
  virtual DeviceInfo device_info() = 0;

  // Loads one image into the calling thread's current context (which current_context()
  // returned) and finds `symbol`; allows `dynamic_shared` bytes of dynamic shared memory and
  // clusters of `cluster_size` blocks.
  virtual LoadedFunction load(const std::vector<uint8_t>& image, const std::string& symbol,
                              uint32_t dynamic_shared, uint32_t cluster_size) = 0;
  virtual void unload(ContextKey context, const LoadedFunction& loaded) noexcept = 0;

  virtual void launch(const KernelLaunch& launch) = 0;
  // Writes a 128-byte CUtensorMap at `descriptor`.
  virtual void encode_tensormap(const TensorMapEncode& encode, void* descriptor) = 0;
};

// Process-wide drivers, opened on first use; they throw NO_DRIVER when the library is missing.
Driver& cuda_driver();
Driver& hip_driver();
// The driver that runs a vendor's archives: CUDA for nvidia, HIP for amd.
Driver& driver_for(Vendor vendor);
// The calling thread's current device: CUDA first, then HIP. Throws NO_DRIVER / NO_DEVICE
// naming what each attempt found.
DeviceInfo detect_current_device();

}  // namespace attnpack
