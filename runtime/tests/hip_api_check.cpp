// Compiles only if src/drivers/hip_api.hpp agrees with a real hip_runtime_api.h (HIP 6).
#include <hip/hip_runtime_api.h>

#include <cstddef>

#include "drivers/hip_api.hpp"

namespace ours = attnpack::hip;

static_assert(ours::hipSuccess == hipSuccess);
static_assert(ours::hipDeviceAttributeMultiprocessorCount == hipDeviceAttributeMultiprocessorCount);
static_assert(ours::hipDeviceAttributeSharedMemPerBlockOptin == hipDeviceAttributeSharedMemPerBlockOptin);
static_assert(ours::kDevicePropR0600Size == sizeof(hipDeviceProp_tR0600));
static_assert(ours::kGcnArchNameOffset == offsetof(hipDeviceProp_tR0600, gcnArchName));
static_assert(ours::kGcnArchNameSize == sizeof(hipDeviceProp_tR0600::gcnArchName));
static_assert(ours::kNameOffset == offsetof(hipDeviceProp_tR0600, name));
static_assert(ours::kNameSize == sizeof(hipDeviceProp_tR0600::name));
