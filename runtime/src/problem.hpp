// One SDPA problem as the runtime sees it, and the launch-spec vocabulary it is read with.
//
// The words mirror python/attnpack/abi.py: a launch spec names kernel parameters, grid factors
// and workspace shapes with them, and every word resolves against a Problem.
#pragma once

#include <cstdint>
#include <string>

#include "attnpack/attnpack.h"

namespace attnpack {

enum class Op : uint8_t { Forward, Backward };
enum class Dtype : uint8_t { FP16, BF16, FP32 };

const char* op_word(Op op);           // "fwd", "bwd"
const char* dtype_word(Dtype dtype);  // "fp16", "bf16", "fp32"
uint32_t dtype_bytes(Dtype dtype);

// Element tensors (abi.TENSORS), in the vocabulary's order.
enum TensorId : uint8_t { kQ, kK, kV, kO, kDo, kDq, kDk, kDv, kNumTensors };
extern const char* const kTensorWords[kNumTensors];  // "q", "k", ..., "do", ...

// Size words (abi.SIZES) plus the grid-only "num_sms".
enum SizeId : uint8_t { kB, kHq, kHkv, kSq, kSk, kNumSms, kNumSizeWords };
extern const char* const kSizeWords[kNumSizeWords];

// Logical axes of an element tensor, outermost first: [B, H, S, D].
enum Axis : uint8_t { kAxisB, kAxisH, kAxisS, kAxisD };
extern const char kAxisLetters[4];  // 'b', 'h', 's', 'd'

struct TensorView {
  uint64_t address = 0;
  int64_t stride[4] = {0, 0, 0, 0};  // elements, per Axis
};

struct Problem {
  Op op = Op::Forward;
  Dtype dtype = Dtype::FP16;
  bool causal = false;
  int32_t head_dim = 0;
  float scale = 0;                   // resolved: never 0 or NaN
  int64_t sizes[kNumSizeWords] = {};  // kNumSms is filled in from the device at launch
  TensorView tensors[kNumTensors];
  uint64_t lse = 0;                  // float32, contiguous [B, Hq, Sq]
  const char* kernel = nullptr;      // forced kernel name (the caller's, valid for the call)
  bool deterministic = false;        // ATTNPACK_PROBLEM_DETERMINISTIC: deterministic kernels only
  // The tuning map's by_gpu list that names the calling thread's device (its position in
  // TuningRecord::by_gpu), or -1: none does, or no device was asked. Filled in from the device
  // (Bundle::with_device_facts), never from the caller's struct.
  int32_t gpu_tuning = -1;

  // Logical [B, H, S, D] extents of an element tensor.
  void shape_of(TensorId tensor, int64_t out[4]) const;
};

// Validates struct_size and the enums of a caller's struct; throws INVALID_ARGUMENT. Fields
// past the caller's struct_size (an older caller's struct) read as zero.
Problem problem_from_c(const attnpack_problem* problem);

// "fwd bf16 B=2 Hq=32 Hkv=8 Sq=128 Sk=1000 D=128 causal"
std::string describe(const Problem& problem);

}  // namespace attnpack
