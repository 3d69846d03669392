#include "problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "error.hpp"

namespace attnpack {

const char* const kTensorWords[kNumTensors] = {"q", "k", "v", "o", "do", "dq", "dk", "dv"};
const char* const kSizeWords[kNumSizeWords] = {"B", "Hq", "Hkv", "Sq", "Sk", "num_sms"};
const char kAxisLetters[4] = {'b', 'h', 's', 'd'};

const char* op_word(Op op) { return op == Op::Forward ? "fwd" : "bwd"; }

const char* dtype_word(Dtype dtype) {
  switch (dtype) {
    case Dtype::FP16: return "fp16";
    case Dtype::BF16: return "bf16";
    case Dtype::FP32: return "fp32";
  }
  return "?";
}

uint32_t dtype_bytes(Dtype dtype) { return dtype == Dtype::FP32 ? 4 : 2; }

void Problem::shape_of(TensorId tensor, int64_t out[4]) const {
  const bool kv_side = tensor == kK || tensor == kV || tensor == kDk || tensor == kDv;
  out[kAxisB] = sizes[kB];
  out[kAxisH] = kv_side ? sizes[kHkv] : sizes[kHq];
  out[kAxisS] = kv_side ? sizes[kSk] : sizes[kSq];
  out[kAxisD] = head_dim;
}

namespace {

TensorView view_of(const attnpack_tensor& tensor) {
  TensorView view;
  view.address = reinterpret_cast<uint64_t>(tensor.data);
  view.stride[kAxisB] = tensor.stride_b;
  view.stride[kAxisH] = tensor.stride_h;
  view.stride[kAxisS] = tensor.stride_s;
  view.stride[kAxisD] = tensor.stride_d;
  return view;
}

}  // namespace

Problem problem_from_c(const attnpack_problem* c_problem) {
  // Version 1 ends before `kernel`; each later version appends fields.
  constexpr size_t kVersion1Size = offsetof(attnpack_problem, kernel);
  if (!c_problem) fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "problem is NULL");
  if (c_problem->struct_size < kVersion1Size) {
    fail(ATTNPACK_STATUS_INVALID_ARGUMENT,
         "attnpack_problem.struct_size is " + std::to_string(c_problem->struct_size) +
             "; version 1 of the struct has " + std::to_string(kVersion1Size) +
             " bytes — set struct_size = sizeof(attnpack_problem)");
  }
  // Only the caller's struct_size bytes are read: the fields an older caller's struct lacks
  // stay zero, and those a newer one appends are ignored.
  attnpack_problem c{};
  std::memcpy(&c, c_problem, std::min<size_t>(c_problem->struct_size, sizeof(c)));
  Problem problem;
  switch (c.op) {
    case ATTNPACK_OP_FWD: problem.op = Op::Forward; break;
    case ATTNPACK_OP_BWD: problem.op = Op::Backward; break;
    default: fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "op " + std::to_string(c.op) + " is not an attnpack_op");
  }
  switch (c.dtype) {
    case ATTNPACK_DTYPE_FP16: problem.dtype = Dtype::FP16; break;
    case ATTNPACK_DTYPE_BF16: problem.dtype = Dtype::BF16; break;
    case ATTNPACK_DTYPE_FP32: problem.dtype = Dtype::FP32; break;
    default:
      fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "dtype " + std::to_string(c.dtype) + " is not an attnpack_dtype");
  }
  problem.causal = c.causal != 0;
  problem.head_dim = c.head_dim;
  problem.sizes[kB] = c.batch;
  problem.sizes[kHq] = c.heads_q;
  problem.sizes[kHkv] = c.heads_kv;
  problem.sizes[kSq] = c.seqlen_q;
  problem.sizes[kSk] = c.seqlen_k;
  const bool default_scale = c.softmax_scale == 0.0f || std::isnan(c.softmax_scale);
  problem.scale = default_scale && c.head_dim > 0 ? float(1.0 / std::sqrt(double(c.head_dim)))
                                                  : c.softmax_scale;
  const attnpack_tensor* tensors[kNumTensors] = {&c.q, &c.k, &c.v, &c.o,
                                                 &c.dout, &c.dq, &c.dk, &c.dv};
  for (int t = 0; t < kNumTensors; ++t) problem.tensors[t] = view_of(*tensors[t]);
  problem.lse = reinterpret_cast<uint64_t>(c.lse);
  problem.kernel = c.kernel;
  if (c.flags & ~ATTNPACK_PROBLEM_DETERMINISTIC) {
    fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "attnpack_problem.flags has unknown bits " +
                                               std::to_string(c.flags & ~ATTNPACK_PROBLEM_DETERMINISTIC));
  }
  problem.deterministic = (c.flags & ATTNPACK_PROBLEM_DETERMINISTIC) != 0;
  return problem;
}

std::string describe(const Problem& p) {
  std::string out = std::string(op_word(p.op)) + " " + dtype_word(p.dtype);
  for (int s = kB; s <= kSk; ++s) out += std::string(" ") + kSizeWords[s] + "=" + std::to_string(p.sizes[s]);
  out += " D=" + std::to_string(p.head_dim) + (p.causal ? " causal" : " full");
  return out;
}

}  // namespace attnpack
