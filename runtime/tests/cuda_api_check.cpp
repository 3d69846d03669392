// Compiles only if src/drivers/cuda_api.hpp agrees with a real cuda.h.
#include <cuda.h>

#include <cstddef>

#include "drivers/cuda_api.hpp"

namespace ours = attnpack::cu;

static_assert(ours::CUDA_SUCCESS == CUDA_SUCCESS);
static_assert(ours::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(ours::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(ours::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(ours::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN ==
              CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
static_assert(ours::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(ours::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED ==
              CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED);
static_assert(ours::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
static_assert(ours::CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE ==
              CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE);
static_assert(ours::CU_CLUSTER_SCHEDULING_POLICY_SPREAD == CU_CLUSTER_SCHEDULING_POLICY_SPREAD);

static_assert(sizeof(ours::CUlaunchAttributeValue) == sizeof(CUlaunchAttributeValue));
static_assert(sizeof(ours::CUlaunchAttribute) == sizeof(CUlaunchAttribute));
static_assert(offsetof(ours::CUlaunchAttribute, value) == offsetof(CUlaunchAttribute, value));
static_assert(sizeof(ours::CUlaunchConfig) == sizeof(CUlaunchConfig));
static_assert(offsetof(ours::CUlaunchConfig, sharedMemBytes) == offsetof(CUlaunchConfig, sharedMemBytes));
static_assert(offsetof(ours::CUlaunchConfig, hStream) == offsetof(CUlaunchConfig, hStream));
static_assert(offsetof(ours::CUlaunchConfig, attrs) == offsetof(CUlaunchConfig, attrs));
static_assert(offsetof(ours::CUlaunchConfig, numAttrs) == offsetof(CUlaunchConfig, numAttrs));
static_assert(sizeof(ours::CUtensorMap) == sizeof(CUtensorMap) && alignof(ours::CUtensorMap) >= alignof(CUtensorMap));

// Tensor-map enum values that launch.cpp writes as numbers.
static_assert(CU_TENSOR_MAP_DATA_TYPE_FLOAT16 == 6 && CU_TENSOR_MAP_DATA_TYPE_FLOAT32 == 7 &&
              CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 == 9);
static_assert(CU_TENSOR_MAP_SWIZZLE_32B == 1 && CU_TENSOR_MAP_SWIZZLE_64B == 2 && CU_TENSOR_MAP_SWIZZLE_128B == 3);
static_assert(CU_TENSOR_MAP_L2_PROMOTION_L2_64B == 1 && CU_TENSOR_MAP_L2_PROMOTION_L2_256B == 3);
static_assert(CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA == 1 && CU_TENSOR_MAP_INTERLEAVE_NONE == 0);
