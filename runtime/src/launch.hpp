// Launch specs, read data-driven: each kernel's steps are planned once at open (every word
// resolved to where its value comes from, each parameter's byte offset taken from the index,
// which the builder read from the image), then each launch resolves the plan against a
// Problem. No C++ is written per kernel, and no argument layout is derived here.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "archive.hpp"
#include "driver.hpp"
#include "problem.hpp"

namespace attnpack {

enum class ParamType : uint8_t { Ptr, I32, I64, F32, TensorMap };

// Where a parameter's value comes from: one per python/attnpack/abi.py SOURCES entry.
enum class ParamSource : uint8_t {
  Tensor,          // an element tensor's address (index: TensorId)
  Lse,             // the lse buffer's address
  Workspace,       // a workspace buffer's address (index: its position in the kernel's list)
  Stride,          // <tensor>_stride_<b|h|s|d>[_bytes] (index: TensorId, axis: Axis; d is always 1)
  Size,            // B Hq Hkv Sq Sk (index: SizeId)
  HeadDim,         // D: the head dim (i32), as Triton passes a tensor descriptor's last extent
  SmScale,         // sm_scale
  SmScaleLog2,     // sm_scale * log2(e)
  GlobalScratch,   // Triton's trailing global scratch pointer
  ProfileScratch,  // Triton's trailing profile scratch pointer
  TensorMap,       // a host TMA descriptor (index: the step's tensormaps entry)
  GqaGroup,        // Hq_per_Hkv: Hq / Hkv
  LseStride,       // lse_stride_<b|h|s>[_bytes] of the contiguous float32 lse [B, Hq, Sq]
  Constant,        // const:<literal>, parsed from the word (not a vocabulary row)
  WorkspaceStride, // (2.4) <workspace>_stride_<b|h|s|d>: element stride of a workspace buffer's
                   // dim 0..3, the kernel's own word (contiguous float32)
};

// A value transform of the vocabulary (abi.TRANSFORMS): Bytes multiplies by the element size
// (the problem's dtype; 4 for lse).
enum class Transform : uint8_t { None, Bytes };

// A workspace extent: a size, or the head dim ("D": an fp32 dQ accumulator [B, Hq, Sq, D]),
// which takes the first id past the size words (no grid factor uses it); format 2.2's
// "<size>/<n>" divides, rounding up as grid factors do ("Sk/256": one per 256-key program).
// Format 2.6 adds the device's "num_sms" and literals "const:<n>" (the id after D, n kept in
// `divisor`): a persistent kernel's per-program buffers, [num_sms, const:256, D].
constexpr SizeId kWorkspaceHeadDim = SizeId(kNumSizeWords);
constexpr SizeId kWorkspaceConstant = SizeId(kNumSizeWords + 1);
struct WorkspaceExtent {
  SizeId size = kB;
  int64_t divisor = 1;
};
inline int64_t workspace_extent(const Problem& problem, WorkspaceExtent extent) {
  if (extent.size == kWorkspaceConstant) return extent.divisor;
  const int64_t value = extent.size == kWorkspaceHeadDim ? int64_t(problem.head_dim) : problem.sizes[extent.size];
  return (value + extent.divisor - 1) / extent.divisor;
}

struct ParamSlot {
  const std::string* word = nullptr;
  ParamSource source = ParamSource::Size;
  ParamType type = ParamType::I32;  // the wire type the image takes it as
  Transform transform = Transform::None;
  uint8_t index = 0;
  uint8_t axis = 0;
  uint32_t divisibility = 1;
  uint32_t offset = 0;  // in the packed argument buffer
  int64_t multiplier = 1;           // <word>*<n>
  int64_t constant = 0;             // const:<integer>
  double real_constant = 0;         // const:<decimal> (f32 only)
  bool constant_is_real = false;
  std::vector<WorkspaceExtent> inner;  // WorkspaceStride: the extents of the dims after it
};

// Whether a parameter's value is an integer computed from the problem (or a constant).
bool is_integer_source(ParamSource source);
// An integer parameter's value for `problem`, multiplier applied; false when it overflows
// 64 bits. A stride is in elements, or bytes under Transform::Bytes.
bool integer_value(const ParamSlot& slot, const Problem& problem, int64_t& value);

// The integer facts of a problem a requirement names (abi.REQUIREMENT_WORDS).
enum class Fact : uint8_t { B, Hq, Hkv, Sq, Sk, HeadDim, GqaGroup, NumSms };
// The value of `fact`; NumSms is 0 when the device was not asked.
int64_t fact_value(Fact fact, const Problem& problem);

// A kernel requirement, resolved (RequirementRecord).
struct RequirementPlan {
  enum class Op : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, MultipleOf, In };
  const RequirementRecord* record = nullptr;
  Op op = Op::Eq;
  Fact fact = Fact::B;
  bool operand_is_fact = false;
  Fact operand_fact = Fact::B;
};

// The memory a tensor map views.
struct BufferRef {
  enum Kind : uint8_t { Tensor, Lse, Workspace } kind = Tensor;
  uint8_t index = 0;  // TensorId or workspace position
};

struct TensorMapPlan {
  const TensorMapRecord* record = nullptr;
  BufferRef buffer;
  uint32_t swizzle = 0, l2_promotion = 0, oob_fill = 0;  // driver enum values
};

struct StepPlan {
  const StepRecord* record = nullptr;
  std::vector<ParamSlot> params;
  std::vector<uint32_t> offsets;  // params[i].offset, contiguous for the driver
  uint32_t packed_size = 0;       // the image's kernarg_size: the whole packed buffer
  std::array<std::vector<std::pair<SizeId, int64_t>>, 3> grid;  // factors: ceil(size / d)
  std::vector<TensorMapPlan> tensormaps;
  bool grid_uses_num_sms = false;
};

struct KernelPlan {
  const KernelRecord* record = nullptr;
  std::vector<StepPlan> steps;
  // Per declared buffer: its extents.
  std::vector<std::vector<WorkspaceExtent>> workspace_shapes;
  std::vector<RequirementPlan> requirements;
  bool requires_num_sms = false;  // a requirement names the device's multiprocessor count
  bool uses_tensor[kNumTensors] = {};
  bool uses_lse = false;
  bool workspace_needs_num_sms = false;  // workspace size depends on the device
  std::string defect;  // why this runtime cannot launch it; empty when it can
};

// Plans every step of `kernel`. Never throws for a bad spec: it records `defect` instead, so
// one kernel this runtime cannot launch does not make the whole archive unusable.
KernelPlan plan_kernel(const Archive& archive, const KernelRecord& kernel);

// Why `problem` fails one of the kernel's requirements ("requires Sq == Sk (why): Sq=1, Sk=2"),
// or "". A requirement on num_sms fails while the device's count is unknown (0).
std::string requirement_failure(const KernelPlan& plan, const Problem& problem);

// Why the step's grid for `problem` exceeds the driver's limits (counting cluster blocks), or "".
std::string grid_overflow(const StepPlan& step, const Problem& problem);

// Batches past the grid limits. Attention is independent per batch element, so a problem whose
// B (times the heads on that grid dim) overflows a step's grid is launched as consecutive
// slices of the batch, each a whole problem of its own. The largest batch every step's grid
// takes, made a multiple of what keeps each slice's LSE 16-byte aligned (B·Hq·Sq·4 bytes per
// slice); the problem's own B when it fits; 0 when not even that multiple fits.
int64_t batch_per_launch(const KernelPlan& plan, const Problem& problem);
// The slice [b0, b0 + count) of `problem`'s batch: sizes[kB] = count and every tensor address
// (and the LSE) moved to batch element b0 by its batch stride.
Problem batch_slice(const Problem& problem, int64_t b0, int64_t count);
// Programs per grid dim, before cluster expansion; throws UNSUPPORTED past the limits.
std::array<uint32_t, 3> program_grid(const StepPlan& step, const Problem& problem);

struct WorkspaceLayout {
  std::vector<uint64_t> buffer_offsets;  // per declared buffer
  struct Scratch {
    uint64_t global_offset = 0, profile_offset = 0;
    bool global = false, profile = false;
  };
  std::vector<Scratch> step_scratch;  // per step
  uint64_t total = 0;
};

// Declared buffers in order, each 256-byte aligned, then one scratch region that the steps
// share (they run in order on one stream): per step, global scratch then profile scratch,
// each `size * programs * cluster blocks` bytes. `problem.sizes[kNumSms]` must be set when
// `plan.workspace_needs_num_sms`.
WorkspaceLayout layout_workspace(const KernelPlan& plan, const Problem& problem);

// What resolves a plan's buffer words at launch.
struct LaunchBuffers {
  std::vector<uint64_t> workspace;  // per declared buffer
  uint64_t global_scratch = 0, profile_scratch = 0;
};

// The encode arguments of one tensor map for `problem` (dims innermost first).
TensorMapEncode tensormap_arguments(const TensorMapPlan& map, const KernelPlan& plan,
                                    const Problem& problem, const LaunchBuffers& buffers);

// Packs every parameter of `step` into `out` (step.packed_size bytes, 64-byte aligned) at the
// offsets of the index; bytes no parameter covers (padding) are zero. Tensor maps are encoded
// in place through `driver`. Values have been checked to fit their wire types at selection.
void pack_arguments(const StepPlan& step, const KernelPlan& plan, const Problem& problem,
                    const LaunchBuffers& buffers, Driver& driver, uint8_t* out);

constexpr uint32_t kMaxKernargBytes = 4096;  // CUDA's classic parameter limit
constexpr uint64_t kWorkspaceAlign = 256;

}  // namespace attnpack
