// The few CUDA driver API types and constants libattnpack uses, declared here so that it
// builds without CUDA headers. Values and layouts are those of cuda.h (CUDA 12/13);
// runtime/tests/driver_api_check.cpp static_asserts them against a real cuda.h.
#pragma once

#include <cstdint>

namespace attnpack::cu {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;

constexpr CUresult CUDA_SUCCESS = 0;

constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;

constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
constexpr int CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14;

constexpr int CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4;
constexpr int CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5;
constexpr int CU_CLUSTER_SCHEDULING_POLICY_SPREAD = 1;
constexpr int CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;

// Dynamic shared memory above this needs cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES).
constexpr uint32_t kDefaultDynamicSharedLimit = 48 * 1024;
// Clusters above this many blocks need NON_PORTABLE_CLUSTER_SIZE_ALLOWED.
constexpr uint32_t kPortableClusterSize = 8;

union CUlaunchAttributeValue {
  char pad[64];
  struct {
    unsigned int x, y, z;
  } clusterDim;
  int clusterSchedulingPolicyPreference;
  int programmaticStreamSerializationAllowed;
};

struct CUlaunchAttribute {
  int id;  // CUlaunchAttributeID
  char pad[8 - sizeof(int)];
  CUlaunchAttributeValue value;
};

struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
};

// CUDA 12 aligns it to 64 bytes, CUDA 13 to 128; 128 satisfies both encoders.
struct alignas(128) CUtensorMap {
  uint64_t opaque[16];
};

}  // namespace attnpack::cu
