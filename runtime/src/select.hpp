// Kernel selection: which kernel of the archive serves a problem, or why none does.
//
// Today the archive's `selection` table names one default kernel per functional key
// (op, dtype, head dim, causal). tuned_candidates() is where the tuning database plugs in:
// bucketed Sq/Sk lookups that are tried before the default.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "archive.hpp"
#include "launch.hpp"
#include "problem.hpp"

namespace attnpack {

struct Selection {
  const KernelPlan* plan = nullptr;  // null: unsupported
  std::string unsupported_reason;    // "head_dim 80 not built"
};

class Selector {
 public:
  Selector(const Archive& archive, const std::vector<KernelPlan>& plans);

  // Never returns a defective plan: a chosen kernel this runtime cannot launch throws
  // BAD_LAUNCH_SPEC. Problems not served come back with unsupported_reason set. `trace`
  // (explain only; null on the launch path) receives each candidate and its verdict.
  Selection select(const Problem& problem, std::vector<std::string>* trace = nullptr) const;

  // Why this kernel cannot take this problem ("" when it can): its tensors' layout and
  // alignment, every divisibility promise it was compiled with, and the grid limits.
  static std::string layout_mismatch(const KernelPlan& plan, const Problem& problem);

  // Kernels of every selection entry (preload of the whole table).
  std::vector<uint32_t> selectable_kernels() const;

 private:
  // (op, dtype, head_dim, causal) packed in one integer: the lookup runs on every launch.
  static uint64_t key_of(Op op, Dtype dtype, int32_t head_dim, bool causal);
  std::string unbuilt_reason(const Problem& problem) const;
  std::vector<uint32_t> tuned_candidates(const Problem& problem) const;

  const Archive& archive_;
  const std::vector<KernelPlan>& plans_;
  std::unordered_map<uint64_t, uint32_t> defaults_;  // key -> kernel
  // What is built, for the reason a problem is not served.
  std::set<std::string> ops_;
  std::set<std::pair<std::string, std::string>> dtypes_;               // (op, dtype)
  std::set<std::tuple<std::string, std::string, int32_t>> head_dims_;  // (op, dtype, head_dim)
};

}  // namespace attnpack
