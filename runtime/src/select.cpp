#include "select.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <tuple>

#include "error.hpp"

namespace attnpack {
namespace {

std::string stride_word(int tensor, int axis) {
  return std::string(kTensorWords[tensor]) + "_stride_" + kAxisLetters[axis];
}

// Checks the tensors a tensor map views: the driver needs 16-byte aligned addresses and
// row pitches that are multiples of 16 bytes. Workspace buffers are placed 256-byte aligned
// and contiguous: their pitches are products of their inner extents, times 4 bytes.
std::string tensormap_mismatch(const TensorMapPlan& map, const KernelPlan& plan, const Problem& problem) {
  if (map.buffer.kind == BufferRef::Workspace) {
    const std::vector<WorkspaceExtent>& shape = plan.workspace_shapes[map.buffer.index];
    const int64_t row_bytes = shape.empty() ? 0 : workspace_extent(problem, shape.back()) * 4;
    if (row_bytes % 16 != 0) {
      return "workspace " + plan.record->workspace[map.buffer.index].name + "'s rows are " +
             std::to_string(row_bytes) + " bytes, not a multiple of 16 (tensor map " +
             map.record->param + ")";
    }
    return "";
  }
  if (map.buffer.kind != BufferRef::Tensor) return "";  // lse: checked by the caller
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

std::string functional_text(const Problem& p) {
  return key_text(op_word(p.op), FunctionalKey{dtype_word(p.dtype), p.head_dim, p.causal});
}

const char* origin_word(Origin origin) {
  switch (origin) {
    case Origin::Forced: return "forced ";
    case Origin::Tuned: return "tuned ";
    case Origin::TunedForGpu: return "tuned ";  // the tuning key's line names the GPU
    case Origin::Nearest: return "nearest tuned ";
    case Origin::Default: return "default ";
  }
  return "";
}

}  // namespace

uint32_t bucket_of(int64_t value, const std::vector<uint32_t>& bounds) {
  for (uint32_t bound : bounds) {
    if (value <= int64_t(bound)) return bound;
  }
  return bounds.back();
}

uint64_t Selector::key_of(Op op, Dtype dtype, int32_t head_dim, bool causal) {
  return (uint64_t(op) << 40) | (uint64_t(dtype) << 33) | (uint64_t(causal) << 32) | uint32_t(head_dim);
}

std::optional<uint64_t> Selector::key_of(const std::string& op_text, const FunctionalKey& key) {
  for (Op op : {Op::Forward, Op::Backward}) {
    for (Dtype dtype : {Dtype::FP16, Dtype::BF16, Dtype::FP32}) {
      if (op_text == op_word(op) && key.dtype == dtype_word(dtype)) return key_of(op, dtype, key.head_dim, key.causal);
    }
  }
  return std::nullopt;
}

size_t Selector::TunedKeyHash::operator()(const TunedKey& key) const {
  uint64_t h = key.functional * 0x9E3779B97F4A7C15ull;
  for (uint32_t part : {key.gqa, key.sq, key.sk, key.streams}) h = (h ^ part) * 0x100000001B3ull;
  return size_t(h ^ (h >> 29));
}

Selector::Selector(const Archive& archive, const std::vector<KernelPlan>& plans)
    : archive_(archive), plans_(plans) {
  for (const SelectionRecord& entry : archive.selection()) {
    if (auto key = key_of(entry.op, entry.key)) defaults_[*key] = entry.kernel;
    ops_.insert(entry.op);
    dtypes_.emplace(entry.op, entry.key.dtype);
    head_dims_.emplace(entry.op, entry.key.dtype, entry.key.head_dim);
  }
  // The archive reader has checked each entry: its kernel exists with the entry's key, its
  // bucket values are boundaries, and no key repeats within its array.
  auto index = [](const std::vector<TuningEntry>& entries, TunedEntries& out) {
    for (const TuningEntry& entry : entries) {
      if (auto key = key_of(entry.op, entry.key)) {
        out[TunedKey{*key, entry.gqa, entry.sq, entry.sk, entry.streams}] = &entry;
      }
    }
  };
  index(archive.tuning().entries, tuned_);
  tuned_by_gpu_.resize(archive.tuning().by_gpu.size());
  for (size_t i = 0; i < tuned_by_gpu_.size(); ++i) index(archive.tuning().by_gpu[i].entries, tuned_by_gpu_[i]);
  index_entries();  // the arch-wide entries only: a GPU's are never a nearest entry
}

void Selector::index_entries() {
  const TuningRecord& tuning = archive_.tuning();
  for (const auto& [key, entry] : tuned_) {
    entries_by_functional_[key.functional].push_back(
        {position(tuning.gqa_bounds, key.gqa), position(tuning.seqlen_bounds, key.sq),
         position(tuning.seqlen_bounds, key.sk), position(tuning.streams_bounds, key.streams), key.gqa, key.sq,
         key.sk, key.streams, entry});
  }
  // A fixed order (gqa, sq, sk, streams), so that equal distances resolve as in Python.
  for (auto& [functional, entries] : entries_by_functional_) {
    std::sort(entries.begin(), entries.end(), [](const PlacedEntry& a, const PlacedEntry& b) {
      return std::tie(a.g, a.q, a.k, a.c) < std::tie(b.g, b.q, b.k, b.c);
    });
  }
}

int32_t Selector::position(const std::vector<uint32_t>& bounds, uint32_t value) {
  return int32_t(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
}

const Selector::PlacedEntry* Selector::nearest_entry(const TunedKey& key) const {
  auto found = entries_by_functional_.find(key.functional);
  if (found == entries_by_functional_.end()) return nullptr;
  const TuningRecord& tuning = archive_.tuning();
  const int32_t g = position(tuning.gqa_bounds, key.gqa), q = position(tuning.seqlen_bounds, key.sq),
                k = position(tuning.seqlen_bounds, key.sk), c = position(tuning.streams_bounds, key.streams);
  // Bucket steps over gqa, sq and sk; ties to the smaller streams distance (the class only
  // breaks ties), then to the smaller gqa distance, then to the first in (gqa, sq, sk, streams).
  const PlacedEntry* best = nullptr;
  std::tuple<int32_t, int32_t, int32_t> best_distance;
  for (const PlacedEntry& e : found->second) {  // a few dozen entries, integer arithmetic
    const int32_t dg = std::abs(e.g - g);
    const std::tuple<int32_t, int32_t, int32_t> distance{dg + std::abs(e.q - q) + std::abs(e.k - k),
                                                         std::abs(e.c - c), dg};
    if (!best || distance < best_distance) {
      best = &e;
      best_distance = distance;
    }
  }
  return best;
}

std::optional<std::pair<const TuningEntry*, Origin>> Selector::tuned_candidate(const Problem& p, uint64_t functional,
                                                                     std::vector<std::string>* trace) const {
  // The device's by_gpu list, if one names it (Bundle::with_device_facts found it once).
  const TunedEntries* gpu_entries =
      p.gpu_tuning >= 0 && size_t(p.gpu_tuning) < tuned_by_gpu_.size() ? &tuned_by_gpu_[p.gpu_tuning] : nullptr;
  if (tuned_.empty() && !gpu_entries && !trace) return std::nullopt;  // the launch path skips the bucketing
  const TuningRecord& tuning = archive_.tuning();
  if (tuning.seqlen_bounds.empty() || tuning.gqa_bounds.empty()) {
    if (trace) trace->push_back("tuning key: none (the archive has no tuning buckets)");
    return std::nullopt;
  }
  const bool has_streams = !tuning.streams_bounds.empty();
  const TunedKey key{functional, bucket_of(p.sizes[kHq] / p.sizes[kHkv], tuning.gqa_bounds),
                     bucket_of(p.sizes[kSq], tuning.seqlen_bounds), bucket_of(p.sizes[kSk], tuning.seqlen_bounds),
                     has_streams ? bucket_of(p.sizes[kB] * p.sizes[kHkv], tuning.streams_bounds) : 0};
  // Spelled out for explain only: the launch path builds no strings.
  auto buckets_text = [&](uint32_t gqa, uint32_t sq, uint32_t sk, uint32_t streams) {
    return "gqa" + std::to_string(gqa) + " sq" + std::to_string(sq) + " sk" + std::to_string(sk) +
           (has_streams ? " streams" + std::to_string(streams) : std::string());
  };
  auto note = [&](const std::string& verdict) {
    if (trace) {
      trace->push_back("tuning key: " + functional_text(p) + " " + buckets_text(key.gqa, key.sq, key.sk, key.streams) +
                       ": " + verdict);
    }
  };
  // The device's own entry for the exact key serves first; a key it lacks goes on by the
  // arch-wide rule below.
  if (gpu_entries) {
    if (auto found = gpu_entries->find(key); found != gpu_entries->end()) {
      if (trace) note("tuned entry for " + archive_.tuning().by_gpu[p.gpu_tuning].gpu);
      return std::make_pair(found->second, Origin::TunedForGpu);
    }
  }
  if (auto found = tuned_.find(key); found != tuned_.end()) {
    note("tuned entry");
    return std::make_pair(found->second, Origin::Tuned);
  }
  if (const PlacedEntry* near = nearest_entry(key)) {
    const PlacedEntry& e = *near;
    if (trace) {
      note("no tuned entry; nearest tuned entry " + buckets_text(e.gqa, e.sq, e.sk, e.streams));
    }
    return std::make_pair(e.entry, Origin::Nearest);
  }
  note("no tuned entry");
  return std::nullopt;
}

uint32_t Selector::forced_kernel(const Problem& p) const {
  std::optional<uint32_t> kernel = archive_.kernel_index(p.kernel);
  if (!kernel) {
    fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "no kernel named '" + std::string(p.kernel) + "' in " + archive_.path());
  }
  return *kernel;
}

std::string Selector::unbuilt_reason(const Problem& p) const {
  const std::string op = op_word(p.op), dtype = dtype_word(p.dtype);
  if (!ops_.count(op)) return "op " + op + " not built";
  if (!dtypes_.count({op, dtype})) return "dtype " + dtype + " not built";
  if (!head_dims_.count({op, dtype, p.head_dim})) return "head_dim " + std::to_string(p.head_dim) + " not built";
  return std::string(p.causal ? "causal " : "non-causal ") + op + " not built for " + dtype +
         " head_dim " + std::to_string(p.head_dim);
}

std::string Selector::layout_mismatch(const KernelPlan& plan, const Problem& problem, int64_t* per_launch_out) {
  std::string unmet = requirement_failure(plan, problem);
  if (!unmet.empty()) return unmet;
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
  // Every value must fit the wire type the kernel takes it as (a stride passed as i32, a
  // scaled word), and every divisibility the kernel was compiled to assume must hold.
  for (const StepPlan& step : plan.steps) {
    for (const ParamSlot& slot : step.params) {
      int64_t value = 0;
      if (is_integer_source(slot.source) && !slot.constant_is_real) {
        if (!integer_value(slot, problem, value)) return *slot.word + " overflows 64 bits";
        if (slot.type == ParamType::I32 && (value > INT32_MAX || value < INT32_MIN)) {
          return *slot.word + "=" + std::to_string(value) + " does not fit the kernel's 32-bit parameter";
        }
      }
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
          if (value % slot.divisibility != 0) {
            return *slot.word + "=" + std::to_string(value) + " is not a multiple of " + div + " (kernel promise)";
          }
          break;
        }
        case ParamSource::Size: {
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
      std::string mismatch = tensormap_mismatch(map, plan, problem);
      if (!mismatch.empty()) return mismatch;
    }
  }
  // Grid limits (a grid of num_sms never exceeds them). A batch past them runs in slices, each
  // of which must suit the kernel as a problem of its own: the first, and a shorter last one.
  const int64_t batch = problem.sizes[kB], per_launch = batch_per_launch(plan, problem);
  if (per_launch_out) *per_launch_out = per_launch;  // read only when "" comes back
  if (per_launch == batch) return "";
  if (per_launch == 0) {
    for (const StepPlan& step : plan.steps) {
      std::string overflow = step.grid_uses_num_sms ? "" : grid_overflow(step, problem);
      if (!overflow.empty()) return overflow + ", even for a batch slice";
    }
    return "the grid limits are exceeded, even for a batch slice";
  }
  const int64_t rest = batch % per_launch;
  for (auto [b0, count] : {std::pair{int64_t(0), per_launch}, std::pair{batch - rest, rest}}) {
    if (count == 0) continue;
    std::string mismatch = layout_mismatch(plan, batch_slice(problem, b0, count));
    if (!mismatch.empty()) {
      return "batch slice [" + std::to_string(b0) + ", " + std::to_string(b0 + count) + "): " + mismatch;
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
  // Tried in order; the last one's failure is the answer (the one a caller can act on).
  struct Candidate {
    uint32_t kernel;
    Origin origin;
  };
  Candidate candidates[2];
  size_t count = 0;
  auto deterministic = [&](uint32_t kernel) { return plans_[kernel].record->deterministic; };
  auto nondeterministic_note = [&](Origin origin, uint32_t kernel, const char* instead) {
    if (!trace) return;  // the launch path builds no strings
    note(origin_word(origin) + plans_[kernel].record->name + ": skipped, not deterministic (deterministic mode); " +
         instead);
  };
  if (p.kernel) {
    const uint32_t forced = forced_kernel(p);
    const KernelRecord& kernel = *plans_[forced].record;
    if (kernel.op != op_word(p.op) || kernel.key.dtype != dtype_word(p.dtype) || kernel.key.head_dim != p.head_dim ||
        kernel.key.causal != p.causal) {
      return unsupported("kernel " + kernel.name + " is for " + key_text(kernel.op, kernel.key) + ", the problem is " +
                         functional_text(p));
    }
    if (p.deterministic && !deterministic(forced)) {
      return unsupported("deterministic mode: kernel " + kernel.name + " is not deterministic");
    }
    candidates[count++] = {forced, Origin::Forced};
  } else {
    const uint64_t functional = key_of(p.op, p.dtype, p.head_dim, p.causal);
    auto found = defaults_.find(functional);
    if (found == defaults_.end()) return unsupported(unbuilt_reason(p));
    if (auto tuned = tuned_candidate(p, functional, trace)) {
      const auto [entry, origin] = *tuned;
      if (!p.deterministic || deterministic(entry->kernel)) {
        candidates[count++] = {entry->kernel, origin};
      } else if (entry->deterministic_kernel) {
        nondeterministic_note(origin, entry->kernel, "its entry's deterministic kernel instead");
        candidates[count++] = {*entry->deterministic_kernel, origin};
      } else {
        nondeterministic_note(origin, entry->kernel, "its entry has no deterministic kernel");
      }
    }
    if (!p.deterministic || deterministic(found->second)) {
      candidates[count++] = {found->second, Origin::Default};
    } else {
      nondeterministic_note(Origin::Default, found->second, "no other candidate");
    }
    if (count == 0) {
      return unsupported("deterministic mode: no kernel declared deterministic serves " + functional_text(p));
    }
  }
  std::string mismatch;
  for (size_t i = 0; i < count; ++i) {
    const KernelPlan& plan = plans_[candidates[i].kernel];
    const bool is_last = i + 1 == count;
    const std::string origin = origin_word(candidates[i].origin);
    if (!plan.defect.empty()) {
      if (!is_last) {
        note(origin + plan.record->name + ": cannot be launched (" + plan.defect + ")");
        continue;
      }
      fail(ATTNPACK_STATUS_BAD_LAUNCH_SPEC,
           archive_.describe("kernel " + plan.record->name + " " + plan.defect));
    }
    int64_t per_launch = 0;
    mismatch = layout_mismatch(plan, p, &per_launch);
    if (mismatch.empty()) {
      note(origin + plan.record->name + ": chosen");
      selection.plan = &plan;
      selection.origin = candidates[i].origin;
      selection.batch_per_launch = per_launch;
      return selection;
    }
    note(origin + plan.record->name + ": rejected, " + mismatch);
  }
  return unsupported(mismatch);
}

std::vector<uint32_t> Selector::selectable_kernels(int32_t gpu_tuning) const {
  std::set<uint32_t> kernels;
  for (const auto& [key, kernel] : defaults_) kernels.insert(kernel);
  auto add = [&](const TunedEntries& entries) {
    for (const auto& [key, entry] : entries) {
      kernels.insert(entry->kernel);
      if (entry->deterministic_kernel) kernels.insert(*entry->deterministic_kernel);
    }
  };
  add(tuned_);
  if (gpu_tuning >= 0 && size_t(gpu_tuning) < tuned_by_gpu_.size()) add(tuned_by_gpu_[gpu_tuning]);
  return {kernels.begin(), kernels.end()};
}

}  // namespace attnpack
