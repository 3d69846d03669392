// The archive reader: one attnpack-<version>-<arch>.apk, mapped read-only (docs/ARCHIVE.md).
//
// open() checks the preamble, the meta and index sha256 and parses the index into the records
// below; an image is inflated and checked against its sha256 only when image_bytes() asks.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "attnpack/attnpack.h"
#include "sha256.hpp"
#include "target.hpp"

struct ZSTD_DDict_s;  // zstd.h's ZSTD_DDict

namespace attnpack {

constexpr uint16_t kFormatMajor = ATTNPACK_ARCHIVE_FORMAT_MAJOR;
constexpr uint16_t kFormatMinor = 0;  // the newest minor this runtime knows (informational)

// A family's declared policy (the index's `families`).
struct FamilyRecord {
  std::string name;
  std::string backend;   // "triton", "prebuilt", ...
  uint32_t priority = 0;  // default-serving rank before tuning (lowest serves)
  std::string license, origin;
};

struct ImageRecord {
  std::string kind;    // "cubin" or "hsaco"
  std::string symbol;  // entry point
  uint64_t offset = 0; // from the meta's images_offset
  uint64_t size = 0;   // compressed bytes
  uint64_t raw_size = 0;
  Sha256Digest sha256{};
};

// A launch-spec parameter: [word, type, divisibility, offset].
struct ParamRecord {
  std::string word;
  std::string type;  // "ptr", "i32", "i64", "f32", "tensormap"
  uint32_t divisibility = 1;
  uint32_t offset = 0;  // bytes into the argument segment, as the image declares it
};

// ceil(word / divisor)
struct GridFactorRecord {
  std::string word;
  int64_t divisor = 1;
};

struct ScratchRecord {
  uint64_t global_size = 0, global_align = 1, profile_size = 0, profile_align = 1;
};

// A host TMA descriptor the runtime encodes before launch (cuTensorMapEncodeTiled); see
// docs/runtime.md "Tensor maps". It views one tensor word in its logical axes, outermost first.
struct TensorMapRecord {
  std::string param;            // the params word (type "tensormap") it is passed as
  std::string tensor;           // q k v o do dq dk dv (problem dtype), lse or a workspace (fp32)
  std::vector<uint32_t> box;    // box extent per logical axis, outermost first
  uint32_t swizzle = 0;         // bytes: 0, 32, 64, 128
  uint32_t l2_promotion = 0;    // bytes: 0, 64, 128, 256
  std::string oob_fill = "zero";  // "zero" or "nan"
};

struct StepRecord {
  std::string name;
  uint32_t image = 0;
  std::string symbol;
  std::vector<ParamRecord> params;
  std::array<std::vector<GridFactorRecord>, 3> grid;
  std::array<uint32_t, 3> block{1, 1, 1};
  uint32_t shared = 0;
  std::array<uint32_t, 3> cluster{1, 1, 1};
  ScratchRecord scratch;
  std::vector<TensorMapRecord> tensormaps;
  uint64_t kernarg_size = 0;
  bool pdl = false;  // 2.5: it waits for the grid ahead itself (programmatic dependent launch)
};

// A condition a problem must meet for its kernel to serve it: [word, op, operand, why]
// (docs/ARCHIVE.md, `requires`). Words and ops are resolved when the kernel is planned.
struct RequirementRecord {
  enum class Operand : uint8_t { Integer, Word, List };
  std::string word, op, why;
  Operand operand = Operand::Integer;
  int64_t integer = 0;
  std::string operand_word;
  std::vector<int64_t> list;  // `in`: 1 to kMaxRequirementValues integers
};
constexpr uint32_t kMaxRequirementValues = 16;

struct WorkspaceRecord {
  std::string name;
  std::vector<std::string> shape;  // size words
};

struct FunctionalKey {
  std::string dtype;  // "fp16", "bf16"
  int32_t head_dim = 0;
  bool causal = false;
};

struct KernelRecord {
  std::string name;
  std::string family;
  std::string op;  // "fwd", "bwd"
  FunctionalKey key;
  std::string config;  // "BLOCK_M=128 num_warps=8 ..." for explain
  bool deterministic = false;  // same inputs give bitwise-equal outputs
  uint32_t family_index = 0;   // into Archive::families()
  std::vector<WorkspaceRecord> workspace;
  std::vector<StepRecord> steps;
  std::vector<RequirementRecord> requirements;  // the index's `requires` (format 2.1)
};

struct SelectionRecord {
  std::string op;
  FunctionalKey key;
  uint32_t kernel = 0;  // index into kernels
};

// One entry of the compiled tuning database: the kernel measured fastest for a bucketed key.
struct TuningEntry {
  std::string op;
  FunctionalKey key;
  uint32_t gqa = 0, sq = 0, sk = 0;  // bucket values (boundaries from TuningRecord)
  uint32_t streams = 0;              // 2.3: the B·Hkv class; 0 when the record has no such axis
  uint32_t kernel = 0;               // index into kernels
  // 2.2: the fastest deterministic candidate when `kernel` is not deterministic (serves under
  // ATTNPACK_PROBLEM_DETERMINISTIC); none when kernel is deterministic or no candidate was.
  std::optional<uint32_t> deterministic_kernel;
};

// 2.7: tuning entries timed on one GPU model (the `tuning` map's `by_gpu`). They serve a
// device whose driver reports exactly `gpu` as its name, and only for their own keys.
struct GpuTuning {
  std::string gpu;                                // "NVIDIA H100 80GB HBM3", as the driver names it
  std::map<std::string, std::string> provenance;  // informational
  std::vector<TuningEntry> entries;               // the arch-wide form and rules, same buckets
};

// The index's `tuning` map. An archive without it has no buckets and no entries.
struct TuningRecord {
  std::vector<uint32_t> seqlen_bounds, gqa_bounds;  // ascending; the rule is in select.cpp
  std::vector<uint32_t> streams_bounds;             // 2.3, optional: empty = no streams axis
  std::vector<TuningEntry> entries;
  std::map<std::string, std::string> provenance;     // informational
  std::vector<GpuTuning> by_gpu;                     // 2.7, optional: sorted by gpu, distinct
};

// "fwd fp16 d32 causal", as python/attnpack/tune/db.py's key_text starts.
std::string key_text(const std::string& op, const FunctionalKey& key);

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws Error
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

class Archive {
 public:
  // Throws Error: ARCHIVE_NOT_FOUND, ARCHIVE_VERSION or ARCHIVE_CORRUPT, naming the file.
  explicit Archive(const std::string& path);

  const std::string& path() const { return path_; }
  uint16_t format_major() const { return format_major_; }
  uint16_t format_minor() const { return format_minor_; }
  const std::string& arch() const { return arch_; }
  const TargetRecord& target() const { return target_; }
  const std::vector<FamilyRecord>& families() const { return families_; }
  const std::string& bundle_version() const { return bundle_version_; }
  const std::map<std::string, std::string>& compilers() const { return compilers_; }
  const std::vector<ImageRecord>& images() const { return images_; }
  const std::vector<KernelRecord>& kernels() const { return kernels_; }
  const std::vector<SelectionRecord>& selection() const { return selection_; }
  const TuningRecord& tuning() const { return tuning_; }
  // The position in kernels() of the kernel named `name`, if there is one.
  std::optional<uint32_t> kernel_index(const std::string& name) const;

  // Inflates image `index` and checks its size and sha256; throws ARCHIVE_CORRUPT naming the
  // file, the image and the kernels that use it. Thread-safe (reads the mapping only).
  std::vector<uint8_t> image_bytes(uint32_t index) const;

  // "archive <path>: <problem>" — the start of every message about this file.
  std::string describe(const std::string& problem) const;

 private:
  struct FreeDictionary {
    void operator()(ZSTD_DDict_s* dictionary) const;
  };
  void parse_meta(const uint8_t* bytes, uint64_t size);
  void parse_index(const uint8_t* bytes, uint64_t size);
  void check_layout();

  std::string path_;
  MappedFile file_;
  uint16_t format_major_ = 0, format_minor_ = 0;
  std::string arch_, bundle_version_;
  TargetRecord target_;
  std::vector<FamilyRecord> families_;
  std::map<std::string, std::string> compilers_;
  uint64_t index_offset_ = 0, index_size_ = 0, index_raw_size_ = 0, images_offset_ = 0;
  Sha256Digest index_sha256_{};
  std::vector<ImageRecord> images_;
  std::vector<KernelRecord> kernels_;
  std::vector<SelectionRecord> selection_;
  std::unordered_map<std::string, uint32_t> kernel_index_;  // name -> position in kernels_
  TuningRecord tuning_;
  // 3.0: the index's zstd dictionary, shared by every image frame (read-only: thread-safe), and
  // its id, which each frame names; none and 0 when the images are plain frames.
  std::unique_ptr<ZSTD_DDict_s, FreeDictionary> dictionary_;
  unsigned dictionary_id_ = 0;
};

}  // namespace attnpack
