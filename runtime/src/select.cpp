#include "select.hpp"

#include "error.hpp"

namespace attnpack {
namespace {

std::string stride_word(int tensor, int axis) {
  return std::string(kTensorWords[tensor]) + "_stride_" + kAxisLetters[axis];
}

// Checks the tensors a tensor map views: the driver needs 16-byte aligned addresses and
// row pitches that are multiples of 16 bytes.
std::string tensormap_mismatch(const TensorMapPlan& map, const Problem& problem) {
  if (map.buffer.kind != BufferRef::Tensor) return "";  // fp32 buffers: checked by the caller
  const int t = map.buffer.index;
  const TensorView& view = problem.tensors[t];
  const uint64_t element_bytes = dtype_bytes(problem.dtype);
  for (int axis : {kAxisS, kAxisH, kAxisB}) {
    const uint64_t pitch = uint64_t(view.stride[axis]) * element_bytes;
    if (pitch % 16 != 0) {
      return stride_word(t, axis) + "=" + std::to_string(view.stride[axis]) + " is a " +
             std::to_string(pitch) + "-byte pitch, not a multiple of 16 (tensor map " +
             map.record->param + ")";
    }
  }
  if (view.address % 16 != 0) return std::string(kTensorWords[t]) + " is not 16-byte aligned";
  return "";
}

}  // namespace

uint64_t Selector::key_of(Op op, Dtype dtype, int32_t head_dim, bool causal) {
  return (uint64_t(op) << 40) | (uint64_t(dtype) << 33) | (uint64_t(causal) << 32) | uint32_t(head_dim);
}

Selector::Selector(const Archive& archive, const std::vector<KernelPlan>& plans)
    : archive_(archive), plans_(plans) {
  for (const SelectionRecord& entry : archive.selection()) {
    // Entries for an op or dtype this runtime does not know (a newer archive) never match.
    for (Op op : {Op::Forward, Op::Backward}) {
      for (Dtype dtype : {Dtype::FP16, Dtype::BF16, Dtype::FP32}) {
        if (entry.op == op_word(op) && entry.key.dtype == dtype_word(dtype)) {
          defaults_[key_of(op, dtype, entry.key.head_dim, entry.key.causal)] = entry.kernel;
        }
      }
    }
    ops_.insert(entry.op);
    dtypes_.emplace(entry.op, entry.key.dtype);
    head_dims_.emplace(entry.op, entry.key.dtype, entry.key.head_dim);
  }
}

std::vector<uint32_t> Selector::tuned_candidates(const Problem&) const {
  // The tuning database (a later format minor) goes here: look up the problem's bucketed
  // (Sq, Sk, B*H) key for its functional key and return the measured-fastest kernels, best
  // first. Each is still checked against the problem's layout before it is used, and the
  // functional key's default stays the last resort.
  return {};
}

std::string Selector::unbuilt_reason(const Problem& p) const {
  const std::string op = op_word(p.op), dtype = dtype_word(p.dtype);
  if (!ops_.count(op)) return "op " + op + " not built";
  if (!dtypes_.count({op, dtype})) return "dtype " + dtype + " not built";
  if (!head_dims_.count({op, dtype, p.head_dim})) return "head_dim " + std::to_string(p.head_dim) + " not built";
  return std::string(p.causal ? "causal " : "non-causal ") + op + " not built for " + dtype +
         " head_dim " + std::to_string(p.head_dim);
}

std::string Selector::layout_mismatch(const KernelPlan& plan, const Problem& problem) {
  const uint64_t element_bytes = dtype_bytes(problem.dtype);
  for (int t = 0; t < kNumTensors; ++t) {
    if (!plan.uses_tensor[t]) continue;
    const TensorView& view = problem.tensors[t];
    const std::string name = kTensorWords[t];
    if (view.stride[kAxisD] != 1) {
      return name + " last-dim stride is " + std::to_string(view.stride[kAxisD]) + ", must be 1";
    }
    for (int axis : {kAxisB, kAxisH, kAxisS}) {
      if (view.stride[axis] < 0) {
        return stride_word(t, axis) + "=" + std::to_string(view.stride[axis]) + " is negative";
      }
    }
    if (view.address % element_bytes != 0) {
      return name + " is not " + std::to_string(element_bytes) + "-byte aligned";
    }
  }
  if (plan.uses_lse && problem.lse % 4 != 0) return "lse is not 4-byte aligned";
  // Every divisibility the kernel was compiled to assume must hold for this problem.
  for (const StepPlan& step : plan.steps) {
    for (const ParamSlot& slot : step.params) {
      if (slot.divisibility <= 1) continue;
      const std::string div = std::to_string(slot.divisibility);
      switch (slot.source) {
        case ParamSource::Tensor:
        case ParamSource::Lse: {
          uint64_t address = slot.source == ParamSource::Lse ? problem.lse : problem.tensors[slot.index].address;
          if (address % slot.divisibility != 0) return *slot.word + " is not " + div + "-byte aligned";
          break;
        }
        case ParamSource::Stride: {
          int64_t value = problem.tensors[slot.index].stride[slot.axis];
          if (value % slot.divisibility != 0) {
            return *slot.word + "=" + std::to_string(value) + " is not a multiple of " + div + " (kernel promise)";
          }
          break;
        }
        case ParamSource::Size: {
          int64_t value = problem.sizes[slot.index];
          if (value % slot.divisibility != 0) {
            return *slot.word + "=" + std::to_string(value) + " is not a multiple of " + div + " (kernel promise)";
          }
          break;
        }
        default:  // workspace and scratch: the runtime places them 256-byte aligned
          break;
      }
    }
    for (const TensorMapPlan& map : step.tensormaps) {
      std::string mismatch = tensormap_mismatch(map, problem);
      if (!mismatch.empty()) return mismatch;
    }
    if (!step.grid_uses_num_sms) {  // a grid of num_sms never exceeds the limits
      std::string overflow = grid_overflow(step, problem);
      if (!overflow.empty()) return overflow;
    }
  }
  return "";
}

Selection Selector::select(const Problem& p, std::vector<std::string>* trace) const {
  Selection selection;
  auto note = [&](const std::string& line) {
    if (trace) trace->push_back(line);
  };
  auto unsupported = [&](std::string reason) {
    note("unsupported: " + reason);
    selection.unsupported_reason = std::move(reason);
    return selection;
  };
  for (int s = kB; s <= kSk; ++s) {
    if (p.sizes[s] < 1) {
      return unsupported(std::string(kSizeWords[s]) + "=" + std::to_string(p.sizes[s]) +
                         ": empty problems are not launched");
    }
  }
  if (p.sizes[kHq] % p.sizes[kHkv] != 0) {
    return unsupported("Hq " + std::to_string(p.sizes[kHq]) + " is not a multiple of Hkv " +
                       std::to_string(p.sizes[kHkv]));
  }
  auto found = defaults_.find(key_of(p.op, p.dtype, p.head_dim, p.causal));
  if (found == defaults_.end()) return unsupported(unbuilt_reason(p));

  std::vector<uint32_t> candidates = tuned_candidates(p);
  candidates.push_back(found->second);
  std::string mismatch;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const KernelPlan& plan = plans_[candidates[i]];
    const bool is_default = i + 1 == candidates.size();
    const std::string origin = is_default ? "default " : "tuned ";
    if (!plan.defect.empty()) {
      if (!is_default) {
        note(origin + plan.record->name + ": cannot be launched (" + plan.defect + ")");
        continue;
      }
      fail(ATTNPACK_STATUS_BAD_LAUNCH_SPEC,
           archive_.describe("kernel " + plan.record->name + " " + plan.defect));
    }
    mismatch = layout_mismatch(plan, p);
    if (mismatch.empty()) {
      note(origin + plan.record->name + ": chosen");
      selection.plan = &plan;
      return selection;
    }
    note(origin + plan.record->name + ": rejected, " + mismatch);
  }
  return unsupported(mismatch);  // the default's: the one a caller can act on
}

std::vector<uint32_t> Selector::selectable_kernels() const {
  std::set<uint32_t> kernels;
  for (const auto& [key, kernel] : defaults_) kernels.insert(kernel);
  return {kernels.begin(), kernels.end()};
}

}  // namespace attnpack
