// Kernel selection: which kernel of the archive serves a problem, or why none does.
//
// A problem naming a kernel (attnpack_problem.kernel, for `attnpack tune`) gets exactly that
// one. Otherwise the archive's tuning entries are tried first: the problem's (op, dtype, head
// dim, causal) plus its bucketed Hq/Hkv, Sq and Sk, bucketed by the rule of
// python/attnpack/tune/buckets.py over the boundaries the archive carries. A bucketed key
// without an entry takes the nearest entry of the same functional key (the rule of
// python/attnpack/tune/db.py `nearest_entry`, docs/tuning.md); the `selection` table's
// default for the functional key serves only where the functional key has no entry at all.
// On a device whose name a `by_gpu` list of the tuning map carries (format 2.7), that list's
// entry for the exact bucketed key serves before all of these; a key the list lacks goes on as
// above, and a GPU's entries are never taken as the nearest entry of another key.
// A deterministic problem (ATTNPACK_PROBLEM_DETERMINISTIC) takes only kernels declared
// deterministic: an entry's `deterministic_kernel` stands in for a winner that is not.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "archive.hpp"
#include "launch.hpp"
#include "problem.hpp"

namespace attnpack {

// Where the chosen kernel came from.
enum class Origin : uint8_t {
  Forced,       // attnpack_problem.kernel named it
  Tuned,        // the arch-wide tuning entry of the problem's bucketed key
  TunedForGpu,  // the entry of that key in the by_gpu list naming the device (problem.gpu_tuning)
  Nearest,      // the arch-wide entry nearest to the key
  Default,      // the `selection` table's default for the functional key
};

struct Selection {
  const KernelPlan* plan = nullptr;  // null: unsupported
  Origin origin = Origin::Default;
  std::string unsupported_reason;    // "head_dim 80 not built"
  int64_t batch_per_launch = 0;      // < B: the batch runs in slices of this many (grid limits)
};

// The bucket holding `value`: the first boundary >= value, else the last boundary. The one
// implementation of python/attnpack/tune/buckets.py's rule; `bounds` ascending, not empty.
uint32_t bucket_of(int64_t value, const std::vector<uint32_t>& bounds);

class Selector {
 public:
  Selector(const Archive& archive, const std::vector<KernelPlan>& plans);

  // Never returns a defective plan: a chosen kernel this runtime cannot launch throws
  // BAD_LAUNCH_SPEC; a forced kernel name the archive lacks throws INVALID_ARGUMENT. Problems
  // not served come back with unsupported_reason set. `trace` (explain only; null on the
  // launch path) receives the tuning key, each candidate and its verdict.
  Selection select(const Problem& problem, std::vector<std::string>* trace = nullptr) const;

  // Why this kernel cannot take this problem ("" when it can): its requirements (the index's
  // `requires`), its tensors' layout and alignment, every value fitting its wire type, every
  // divisibility promise it was compiled with, and the grid limits (a batch past them must
  // split into slices that each pass all of this: batch_per_launch, stored in `per_launch`
  // when the kernel can take the problem and the pointer is given).
  static std::string layout_mismatch(const KernelPlan& plan, const Problem& problem,
                                     int64_t* per_launch = nullptr);

  // Kernels a device can select (preload of the whole table): every selection entry's, every
  // arch-wide tuning entry's and those of by_gpu list `gpu_tuning` (the device's; -1: none).
  // Another GPU model's entries never serve the device, so their kernels are not loaded.
  std::vector<uint32_t> selectable_kernels(int32_t gpu_tuning) const;

 private:
  // (op, dtype, head_dim, causal) packed in one integer: the lookup runs on every launch.
  static uint64_t key_of(Op op, Dtype dtype, int32_t head_dim, bool causal);
  // key_of for an archive record; none for an op or dtype this runtime does not know (a newer
  // archive's), which then never matches.
  static std::optional<uint64_t> key_of(const std::string& op, const FunctionalKey& key);

  // A functional key plus bucket values: one tuning entry's key.
  struct TunedKey {
    uint64_t functional = 0;
    uint32_t gqa = 0, sq = 0, sk = 0, streams = 0;  // streams: 0 when the archive has no such axis
    bool operator==(const TunedKey& other) const {
      return functional == other.functional && gqa == other.gqa && sq == other.sq && sk == other.sk &&
             streams == other.streams;
    }
  };
  struct TunedKeyHash {
    size_t operator()(const TunedKey& key) const;
  };
  using TunedEntries = std::unordered_map<TunedKey, const TuningEntry*, TunedKeyHash>;

  std::string unbuilt_reason(const Problem& problem) const;
  // The tuning entry for this problem (the device's by_gpu entry of its key, else the arch-wide
  // entry of its key, else the nearest arch-wide one of its functional key), if there is one.
  std::optional<std::pair<const TuningEntry*, Origin>> tuned_candidate(const Problem& problem, uint64_t functional,
                                                             std::vector<std::string>* trace) const;
  // A tuning entry placed by its bucket positions (indices into the boundaries).
  struct PlacedEntry {
    int32_t g, q, k, c;  // positions in the bounds (c: streams, 0 without that axis)
    uint32_t gqa, sq, sk, streams;
    const TuningEntry* entry;
  };
  static int32_t position(const std::vector<uint32_t>& bounds, uint32_t value);
  void index_entries();
  // The entry of key's functional key nearest to it (bucket steps summed over GQA class, Sq,
  // Sk; ties by the GQA steps, then the smallest key: python's nearest_entry), or null. Asked
  // only when the key has no entry of its own; a scan of that functional key's entries.
  const PlacedEntry* nearest_entry(const TunedKey& key) const;
  // The kernel attnpack_problem.kernel names; throws INVALID_ARGUMENT if the archive lacks it.
  uint32_t forced_kernel(const Problem& problem) const;

  const Archive& archive_;
  const std::vector<KernelPlan>& plans_;
  std::unordered_map<uint64_t, uint32_t> defaults_;  // key -> kernel
  TunedEntries tuned_;                      // the archive's arch-wide entries
  std::vector<TunedEntries> tuned_by_gpu_;  // per by_gpu list, in its order (Problem::gpu_tuning)
  std::unordered_map<uint64_t, std::vector<PlacedEntry>> entries_by_functional_;
  // What is built, for the reason a problem is not served.
  std::set<std::string> ops_;
  std::set<std::pair<std::string, std::string>> dtypes_;               // (op, dtype)
  std::set<std::tuple<std::string, std::string, int32_t>> head_dims_;  // (op, dtype, head_dim)
};

}  // namespace attnpack
