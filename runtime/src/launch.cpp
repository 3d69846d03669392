#include "launch.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "error.hpp"

namespace attnpack {
namespace {

constexpr double kLog2E = 1.4426950408889634;

struct TypeInfo {
  const char* name;
  ParamType type;
  uint32_t size, align;  // align: what an offset in the packed buffer must be a multiple of
};
// A tensor map's offset is 16-aligned in the buffer: ptxas aligns it to 64 against the
// parameters' address in the constant bank (0x210 on sm_90), which is 48 mod 64.
constexpr TypeInfo kTypes[] = {
    {"ptr", ParamType::Ptr, 8, 8},
    {"i64", ParamType::I64, 8, 8},
    {"i32", ParamType::I32, 4, 4},
    {"f32", ParamType::F32, 4, 4},
    {"tensormap", ParamType::TensorMap, kTensorMapBytes, 16},
};

const TypeInfo* type_named(const std::string& name) {
  for (const TypeInfo& info : kTypes) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

uint64_t align_up(uint64_t value, uint64_t align) { return (value + align - 1) / align * align; }

int find_word(const char* const* words, int count, const std::string& word) {
  for (int i = 0; i < count; ++i) {
    if (word == words[i]) return i;
  }
  return -1;
}

int find_workspace(const KernelRecord& kernel, const std::string& word) {
  for (size_t i = 0; i < kernel.workspace.size(); ++i) {
    if (kernel.workspace[i].name == word) return int(i);
  }
  return -1;
}

// The fixed parameter vocabulary, generated from python/attnpack/abi.py (a CPU test keeps the
// two equal), looked up by hash: opening an archive resolves every parameter of every kernel.
// Workspace buffer and tensor map names are the kernel's own and are looked up in the kernel.
constexpr uint8_t kWirePtr = 1 << 0, kWireI64 = 1 << 1, kWireI32 = 1 << 2, kWireF32 = 1 << 3;

struct VocabularyWord {
  const char* word;
  ParamSource source;
  uint8_t wires;  // kWire* bits: the wire types the word may be passed as
  uint8_t index;  // TensorId or SizeId
  uint8_t axis;
  Transform transform;
};

constexpr VocabularyWord kVocabulary[] = {
#include "vocabulary.inc"
};

uint8_t wire_bit(ParamType type) {
  switch (type) {
    case ParamType::Ptr: return kWirePtr;
    case ParamType::I64: return kWireI64;
    case ParamType::I32: return kWireI32;
    case ParamType::F32: return kWireF32;
    case ParamType::TensorMap: return 0;
  }
  return 0;
}

const VocabularyWord* find_fixed(const std::string& word) {
  static const std::unordered_map<std::string, const VocabularyWord*> words = [] {
    std::unordered_map<std::string, const VocabularyWord*> out;
    for (const VocabularyWord& entry : kVocabulary) out.emplace(entry.word, &entry);
    return out;
  }();
  auto found = words.find(word);
  return found == words.end() ? nullptr : found->second;
}

// The buffer a word names (an element tensor, lse or a workspace buffer); false if none.
// Element tensors and lse come first: a workspace buffer cannot shadow them.
bool resolve_buffer(const std::string& word, const KernelRecord& kernel, BufferRef& ref) {
  const VocabularyWord* fixed = find_fixed(word);
  int index;
  if (fixed && fixed->source == ParamSource::Tensor) {
    ref = {BufferRef::Tensor, fixed->index};
  } else if (fixed && fixed->source == ParamSource::Lse) {
    ref = {BufferRef::Lse, 0};
  } else if ((index = find_workspace(kernel, word)) >= 0) {
    ref = {BufferRef::Workspace, uint8_t(index)};
  } else {
    return false;
  }
  return true;
}

// Resolves one parameter word to its source; `wires` gets the wire types it may take.
// Returns false for a word this runtime does not know. Precedence: the vocabulary (element
// tensors and lse cannot be shadowed), then the kernel's workspace buffers, then its tensor maps.
bool resolve_word(const std::string& word, const KernelRecord& kernel, const StepRecord& step,
                  ParamSlot& slot, uint8_t& wires) {
  if (const VocabularyWord* fixed = find_fixed(word)) {
    slot.source = fixed->source;
    slot.index = fixed->index;
    slot.axis = fixed->axis;
    slot.transform = fixed->transform;
    wires = fixed->wires;
    return true;
  }
  const int workspace = find_workspace(kernel, word);
  if (workspace >= 0) {
    slot.source = ParamSource::Workspace;
    slot.index = uint8_t(workspace);
    wires = kWirePtr;
    return true;
  }
  for (size_t m = 0; m < step.tensormaps.size(); ++m) {
    if (step.tensormaps[m].param == word) {
      slot.source = ParamSource::TensorMap;
      slot.index = uint8_t(m);
      wires = 0;  // only the tensormap type
      return true;
    }
  }
  return false;
}

uint32_t buffer_rank(const BufferRef& ref, const KernelRecord& kernel) {
  switch (ref.kind) {
    case BufferRef::Tensor: return 4;
    case BufferRef::Lse: return 3;
    case BufferRef::Workspace: return uint32_t(kernel.workspace[ref.index].shape.size());
  }
  return 0;
}

// Each plan_* fills one concern of a step's plan and returns the defect, or "" when it is fine.

// The image and launch shape this runtime can load and launch for the archive's target.
std::string check_image(const Archive& archive, const StepRecord& step) {
  const bool hip = archive.target().vendor == Vendor::Amd;
  const ImageRecord& image = archive.images()[step.image];
  if (image.kind != archive.target().image_kind) {
    return "its image is a " + image.kind + ", an " + archive.arch() + " archive needs " +
           archive.target().image_kind;
  }
  if (image.symbol != step.symbol) {
    return "symbol " + step.symbol + " differs from its image's " + image.symbol;
  }
  for (int d = 0; d < 3; ++d) {
    if (step.block[d] == 0 || step.cluster[d] == 0) return "has a zero block or cluster dim";
  }
  const uint64_t threads = uint64_t(step.block[0]) * step.block[1] * step.block[2];
  const uint64_t cluster_blocks = uint64_t(step.cluster[0]) * step.cluster[1] * step.cluster[2];
  if (threads > 1024) return "has more than 1024 threads per block";
  if (cluster_blocks > 16) return "has clusters of more than 16 blocks";
  if (hip && cluster_blocks != 1) return "declares clusters, which HIP does not launch";
  if (hip && !step.tensormaps.empty()) return "declares tensor maps, which are CUDA-only";
  return "";
}

std::string plan_tensormaps(const KernelRecord& kernel, const StepRecord& step, KernelPlan& kernel_plan,
                            StepPlan& plan) {
  for (const TensorMapRecord& record : step.tensormaps) {
    TensorMapPlan map;
    map.record = &record;
    if (!resolve_buffer(record.tensor, kernel, map.buffer)) {
      return "tensor map " + record.param + " views unknown tensor '" + record.tensor + "'";
    }
    const uint32_t rank = buffer_rank(map.buffer, kernel);
    if (record.box.size() != rank || rank < 1 || rank > 5) {
      return "tensor map " + record.param + " has a box of " + std::to_string(record.box.size()) +
             " dims for a tensor of rank " + std::to_string(rank);
    }
    for (uint32_t extent : record.box) {
      if (extent == 0 || extent > 256) return "tensor map " + record.param + " has a box extent outside 1..256";
    }
    // The driver's enums count these byte sizes from 0: NONE, 32B, 64B, 128B / NONE, 64B, ...
    static const uint32_t swizzles[] = {0, 32, 64, 128}, promotions[] = {0, 64, 128, 256};
    const uint32_t* swizzle = std::find(swizzles, swizzles + 4, record.swizzle);
    const uint32_t* promotion = std::find(promotions, promotions + 4, record.l2_promotion);
    const std::string where = "tensor map " + record.param;
    if (swizzle == swizzles + 4) return where + " has swizzle " + std::to_string(record.swizzle);
    if (promotion == promotions + 4) {
      return where + " has l2_promotion " + std::to_string(record.l2_promotion);
    }
    if (record.oob_fill != "zero" && record.oob_fill != "nan") return where + " has oob_fill " + record.oob_fill;
    map.swizzle = uint32_t(swizzle - swizzles);
    map.l2_promotion = uint32_t(promotion - promotions);
    map.oob_fill = record.oob_fill == "nan" ? 1 : 0;
    if (map.buffer.kind == BufferRef::Tensor) {
      kernel_plan.uses_tensor[map.buffer.index] = true;
    } else if (map.buffer.kind == BufferRef::Lse) {
      kernel_plan.uses_lse = true;
    }
    plan.tensormaps.push_back(map);
  }
  return "";
}

// Every parameter: a known word, a wire type the word may take, and a place in the argument
// segment (aligned, inside kernarg_size, overlapping no other parameter).
std::string plan_params(const KernelRecord& kernel, const StepRecord& step, KernelPlan& kernel_plan,
                        StepPlan& plan) {
  if (step.kernarg_size > kMaxKernargBytes) {
    return "has " + std::to_string(step.kernarg_size) + " bytes of arguments (more than " +
           std::to_string(kMaxKernargBytes) + ")";
  }
  std::vector<std::pair<uint32_t, uint32_t>> spans;  // [offset, end) per parameter
  for (const ParamRecord& param : step.params) {
    ParamSlot slot;
    slot.word = &param.word;
    uint8_t wires = 0;
    if (!resolve_word(param.word, kernel, step, slot, wires)) {
      return "parameter word '" + param.word + "' is not in this runtime's vocabulary — update the runtime";
    }
    const TypeInfo* declared = type_named(param.type);
    const bool fits = declared && (slot.source == ParamSource::TensorMap
                                       ? declared->type == ParamType::TensorMap
                                       : (wires & wire_bit(declared->type)) != 0);
    if (!fits) {
      return "parameter " + param.word + " has type " + param.type + ", which its word cannot take";
    }
    slot.type = declared->type;
    if (param.divisibility == 0 || (param.divisibility & (param.divisibility - 1)) != 0) {
      return "parameter " + param.word + " has divisibility " + std::to_string(param.divisibility);
    }
    slot.divisibility = param.divisibility;
    if (param.offset % declared->align != 0 || uint64_t(param.offset) + declared->size > step.kernarg_size) {
      return "parameter " + param.word + " at byte " + std::to_string(param.offset) +
             " is misaligned or ends past the " + std::to_string(step.kernarg_size) + "-byte argument segment";
    }
    slot.offset = param.offset;
    spans.emplace_back(param.offset, param.offset + declared->size);
    if (slot.source == ParamSource::Tensor) kernel_plan.uses_tensor[slot.index] = true;
    if (slot.source == ParamSource::Lse) kernel_plan.uses_lse = true;
    plan.params.push_back(slot);
    plan.offsets.push_back(slot.offset);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) {
      return "has parameters that overlap at byte " + std::to_string(spans[i].first);
    }
  }
  plan.packed_size = uint32_t(step.kernarg_size);
  return "";
}

std::string plan_grid(const StepRecord& step, StepPlan& plan) {
  for (int d = 0; d < 3; ++d) {
    for (const GridFactorRecord& factor : step.grid[d]) {
      int size = find_word(kSizeWords, kNumSizeWords, factor.word);
      if (size < 0) return "grid factor '" + factor.word + "' is not in this runtime's vocabulary";
      plan.grid[d].emplace_back(SizeId(size), factor.divisor);
      plan.grid_uses_num_sms |= size == kNumSms;
    }
  }
  return "";
}

std::string plan_step(const Archive& archive, const KernelRecord& kernel, const StepRecord& step,
                      KernelPlan& kernel_plan, StepPlan& plan) {
  plan.record = &step;
  std::string defect = check_image(archive, step);
  if (defect.empty()) defect = plan_tensormaps(kernel, step, kernel_plan, plan);
  if (defect.empty()) defect = plan_params(kernel, step, kernel_plan, plan);
  if (defect.empty()) defect = plan_grid(step, plan);
  return defect;
}

uint64_t checked_multiply(uint64_t a, uint64_t b, const char* what) {
  uint64_t out;
  if (__builtin_mul_overflow(a, b, &out)) {
    fail(ATTNPACK_STATUS_UNSUPPORTED, std::string(what) + " overflows 64 bits");
  }
  return out;
}

}  // namespace

int64_t stride_value(const ParamSlot& slot, const Problem& problem) {
  const int64_t stride = problem.tensors[slot.index].stride[slot.axis];
  return slot.transform == Transform::Bytes ? stride * int64_t(dtype_bytes(problem.dtype)) : stride;
}

KernelPlan plan_kernel(const Archive& archive, const KernelRecord& kernel) {
  KernelPlan plan;
  plan.record = &kernel;
  for (const WorkspaceRecord& buffer : kernel.workspace) {
    std::vector<SizeId> shape;
    for (const std::string& word : buffer.shape) {
      int size = word == "D" ? int(kWorkspaceHeadDim) : find_word(kSizeWords, kSk + 1, word);
      if (size < 0) {
        plan.defect = "workspace " + buffer.name + " has size word '" + word +
                      "', which is not in this runtime's vocabulary — update the runtime";
        return plan;
      }
      shape.push_back(SizeId(size));
    }
    plan.workspace_shapes.push_back(std::move(shape));
  }
  plan.steps.resize(kernel.steps.size());
  for (size_t i = 0; i < kernel.steps.size(); ++i) {
    std::string defect = plan_step(archive, kernel, kernel.steps[i], plan, plan.steps[i]);
    if (!defect.empty()) {
      plan.defect = "step " + kernel.steps[i].name + " " + defect;
      return plan;
    }
    const ScratchRecord& scratch = kernel.steps[i].scratch;
    if (scratch.global_size > 0 || scratch.profile_size > 0) {
      plan.scratch_needs_num_sms |= plan.steps[i].grid_uses_num_sms;
    }
  }
  return plan;
}

std::string grid_overflow(const StepPlan& step, const Problem& problem) {
  static const int64_t limits[3] = {INT32_MAX, 65535, 65535};
  for (int d = 0; d < 3; ++d) {
    int64_t blocks = step.record->cluster[d];  // at most 16
    for (const auto& [size, divisor] : step.grid[d]) {
      blocks *= (problem.sizes[size] + divisor - 1) / divisor;  // int32 sizes: no overflow here
      if (blocks > limits[d]) {
        return "grid " + std::string(1, "xyz"[d]) + " of step " + step.record->name + " exceeds " +
               std::to_string(limits[d]) + " blocks";
      }
    }
  }
  return "";
}

std::array<uint32_t, 3> program_grid(const StepPlan& step, const Problem& problem) {
  std::string overflow = grid_overflow(step, problem);
  if (!overflow.empty()) fail(ATTNPACK_STATUS_UNSUPPORTED, overflow);
  std::array<uint32_t, 3> grid{};
  for (int d = 0; d < 3; ++d) {
    int64_t programs = 1;
    for (const auto& [size, divisor] : step.grid[d]) programs *= (problem.sizes[size] + divisor - 1) / divisor;
    grid[d] = uint32_t(programs);
  }
  return grid;
}

WorkspaceLayout layout_workspace(const KernelPlan& plan, const Problem& problem) {
  WorkspaceLayout layout;
  uint64_t offset = 0;
  for (const std::vector<SizeId>& shape : plan.workspace_shapes) {
    offset = align_up(offset, kWorkspaceAlign);
    layout.buffer_offsets.push_back(offset);
    uint64_t bytes = sizeof(float);
    for (SizeId size : shape) {
      bytes = checked_multiply(bytes, uint64_t(workspace_extent(problem, size)), "the workspace size");
    }
    offset += bytes;
  }
  // One scratch region, shared by the steps: they run one after another on one stream.
  uint64_t base_align = kWorkspaceAlign, region = 0;
  for (const StepPlan& step : plan.steps) {
    base_align = std::max({base_align, step.record->scratch.global_align, step.record->scratch.profile_align});
  }
  const uint64_t scratch_base = align_up(offset, base_align);
  for (const StepPlan& step : plan.steps) {
    const ScratchRecord& scratch = step.record->scratch;
    WorkspaceLayout::Scratch placed;
    if (scratch.global_size > 0 || scratch.profile_size > 0) {
      std::array<uint32_t, 3> grid = program_grid(step, problem);
      const std::array<uint32_t, 3>& cluster = step.record->cluster;
      uint64_t blocks = uint64_t(grid[0]) * grid[1] * grid[2];
      blocks = checked_multiply(blocks, uint64_t(cluster[0]) * cluster[1] * cluster[2], "the scratch size");
      uint64_t end = 0;
      if (scratch.global_size > 0) {
        placed.global = true;
        placed.global_offset = scratch_base;
        end = checked_multiply(blocks, scratch.global_size, "the scratch size");
      }
      if (scratch.profile_size > 0) {
        placed.profile = true;
        uint64_t start = align_up(end, std::max<uint64_t>(kWorkspaceAlign, scratch.profile_align));
        placed.profile_offset = scratch_base + start;
        end = start + checked_multiply(blocks, scratch.profile_size, "the scratch size");
      }
      region = std::max(region, end);
    }
    layout.step_scratch.push_back(placed);
  }
  layout.total = region > 0 ? scratch_base + region : offset;
  return layout;
}

TensorMapEncode tensormap_arguments(const TensorMapPlan& map, const KernelPlan& plan,
                                    const Problem& problem, const LaunchBuffers& buffers) {
  // CUtensorMapDataType: FLOAT16 = 6, FLOAT32 = 7, BFLOAT16 = 9.
  TensorMapEncode encode;
  int64_t extents[5] = {};  // outermost first
  int64_t strides[5] = {};  // elements, outermost first
  uint64_t element_bytes = 4;
  switch (map.buffer.kind) {
    case BufferRef::Tensor: {
      const TensorView& view = problem.tensors[map.buffer.index];
      problem.shape_of(TensorId(map.buffer.index), extents);
      std::copy(view.stride, view.stride + 4, strides);
      encode.rank = 4;
      encode.address = view.address;
      element_bytes = dtype_bytes(problem.dtype);
      encode.data_type = problem.dtype == Dtype::FP16 ? 6 : problem.dtype == Dtype::BF16 ? 9 : 7;
      break;
    }
    case BufferRef::Lse:
      extents[0] = problem.sizes[kB];
      extents[1] = problem.sizes[kHq];
      extents[2] = problem.sizes[kSq];
      encode.rank = 3;
      encode.address = problem.lse;
      encode.data_type = 7;
      break;
    case BufferRef::Workspace: {
      const std::vector<SizeId>& shape = plan.workspace_shapes[map.buffer.index];
      for (size_t i = 0; i < shape.size(); ++i) extents[i] = workspace_extent(problem, shape[i]);
      encode.rank = uint32_t(shape.size());
      encode.address = buffers.workspace[map.buffer.index];
      encode.data_type = 7;
      break;
    }
  }
  if (map.buffer.kind != BufferRef::Tensor) {  // contiguous float32
    int64_t stride = 1;
    for (int i = int(encode.rank) - 1; i >= 0; --i) {
      strides[i] = stride;
      stride *= extents[i];
    }
  }
  // The driver wants dims innermost first and the strides of dims 1.. in bytes.
  for (uint32_t i = 0; i < encode.rank; ++i) {
    const uint32_t outer = encode.rank - 1 - i;
    encode.dims[i] = uint64_t(extents[outer]);
    encode.box[i] = map.record->box[outer];
    encode.element_strides[i] = 1;
    if (i > 0) encode.strides[i - 1] = uint64_t(strides[outer]) * element_bytes;
  }
  encode.swizzle = map.swizzle;
  encode.l2_promotion = map.l2_promotion;
  encode.oob_fill = map.oob_fill;
  return encode;
}

void pack_arguments(const StepPlan& step, const KernelPlan& plan, const Problem& problem,
                    const LaunchBuffers& buffers, Driver& driver, uint8_t* out) {
  std::memset(out, 0, step.packed_size);
  for (const ParamSlot& slot : step.params) {
    uint8_t* at = out + slot.offset;
    uint64_t address = 0;
    switch (slot.source) {
      case ParamSource::Tensor: address = problem.tensors[slot.index].address; break;
      case ParamSource::Lse: address = problem.lse; break;
      case ParamSource::Workspace: address = buffers.workspace[slot.index]; break;
      case ParamSource::GlobalScratch: address = buffers.global_scratch; break;
      case ParamSource::ProfileScratch: address = buffers.profile_scratch; break;
      case ParamSource::Stride: {
        const int64_t stride = stride_value(slot, problem);
        if (slot.type == ParamType::I32) {
          const int32_t narrow = int32_t(stride);  // layout_mismatch refused values that do not fit
          std::memcpy(at, &narrow, sizeof(narrow));
        } else {
          std::memcpy(at, &stride, sizeof(stride));
        }
        continue;
      }
      case ParamSource::HeadDim:
      case ParamSource::Size: {
        int32_t size = slot.source == ParamSource::HeadDim ? problem.head_dim
                                                           : int32_t(problem.sizes[slot.index]);
        std::memcpy(at, &size, sizeof(size));
        continue;
      }
      case ParamSource::SmScale:
      case ParamSource::SmScaleLog2: {
        float scale = slot.source == ParamSource::SmScale ? problem.scale
                                                          : float(double(problem.scale) * kLog2E);
        std::memcpy(at, &scale, sizeof(scale));
        continue;
      }
      case ParamSource::TensorMap: {
        TensorMapEncode encode = tensormap_arguments(step.tensormaps[slot.index], plan, problem, buffers);
        driver.encode_tensormap(encode, at);
        continue;
      }
    }
    std::memcpy(at, &address, sizeof(address));
  }
}

}  // namespace attnpack
