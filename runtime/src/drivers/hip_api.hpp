// The few HIP types and constants libattnpack uses, declared here so that it builds without
// ROCm headers. Values and layouts are those of hip_runtime_api.h (HIP 6);
// runtime/tests/driver_api_check.cpp static_asserts them against a real header.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attnpack::hip {

using hipError_t = int;
using hipModule_t = struct ihipModule_t*;
using hipFunction_t = struct ihipModuleSymbol_t*;
using hipStream_t = struct ihipStream_t*;

constexpr hipError_t hipSuccess = 0;

constexpr int hipDeviceAttributeMultiprocessorCount = 63;
constexpr int hipDeviceAttributeSharedMemPerBlockOptin = 75;

// hipModuleLaunchKernel's `extra` words for a packed argument buffer:
// HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END.
constexpr uintptr_t kLaunchParamBufferPointer = 0x01;
constexpr uintptr_t kLaunchParamBufferSize = 0x02;
constexpr uintptr_t kLaunchParamEnd = 0x03;

// hipDeviceProp_tR0600 (HIP >= 6): only its size and where name and gcnArchName sit are needed.
constexpr size_t kDevicePropR0600Size = 1472;
constexpr size_t kNameOffset = 0;  // char name[256], the first member
constexpr size_t kNameSize = 256;
constexpr size_t kGcnArchNameOffset = 1160;
constexpr size_t kGcnArchNameSize = 256;

constexpr int kMinimumMajorVersion = 6;

}  // namespace attnpack::hip
