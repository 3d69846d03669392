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
  uint32_t size, align;
};
constexpr TypeInfo kTypes[] = {
    {"ptr", ParamType::Ptr, 8, 8},
    {"i64", ParamType::I64, 8, 8},
    {"i32", ParamType::I32, 4, 4},
    {"f32", ParamType::F32, 4, 4},
    {"tensormap", ParamType::TensorMap, kTensorMapBytes, kTensorMapAlign},
};

const TypeInfo* type_named(const std::string& name) {
  for (const TypeInfo& info : kTypes) {
    if (name == info.name) return &info;
  }
  return nullptr;
}
const TypeInfo& type_info(ParamType type) {
  for (const TypeInfo& info : kTypes) {
    if (info.type == type) return info;
  }
  return kTypes[0];
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

// The fixed parameter vocabulary (the order of abi.param_type), one hash lookup per word.
// Opening an archive resolves every parameter of every kernel; scanning the word lists with
// string compares was a quarter of the open time. Workspace buffer and tensor map names are
// the kernel's own and are looked up in the kernel.
struct FixedWord {
  ParamSource source;
  ParamType type;
  uint8_t index = 0;
  uint8_t axis = 0;
};

const std::unordered_map<std::string, FixedWord>& fixed_words() {
  static const std::unordered_map<std::string, FixedWord> words = [] {
    std::unordered_map<std::string, FixedWord> out;
    for (uint8_t t = 0; t < kNumTensors; ++t) {
      out.emplace(kTensorWords[t], FixedWord{ParamSource::Tensor, ParamType::Ptr, t});
      // <tensor>_stride_<b|h|s|d>; d (always 1) only appears beside a tensor descriptor,
      // whose strides Triton passes in full
      for (uint8_t axis = kAxisB; axis <= kAxisD; ++axis) {
        out.emplace(std::string(kTensorWords[t]) + "_stride_" + kAxisLetters[axis],
                    FixedWord{ParamSource::Stride, ParamType::I64, t, axis});
      }
    }
    out.emplace("lse", FixedWord{ParamSource::Lse, ParamType::Ptr});
    out.emplace("global_scratch", FixedWord{ParamSource::GlobalScratch, ParamType::Ptr});
    out.emplace("profile_scratch", FixedWord{ParamSource::ProfileScratch, ParamType::Ptr});
    for (uint8_t size = 0; size <= kSk; ++size) {  // num_sms is a grid word only
      out.emplace(kSizeWords[size], FixedWord{ParamSource::Size, ParamType::I32, size});
    }
    out.emplace("D", FixedWord{ParamSource::HeadDim, ParamType::I32});
    out.emplace("sm_scale", FixedWord{ParamSource::SmScale, ParamType::F32});
    out.emplace("sm_scale_log2", FixedWord{ParamSource::SmScaleLog2, ParamType::F32});
    return out;
  }();
  return words;
}

const FixedWord* find_fixed(const std::string& word) {
  auto found = fixed_words().find(word);
  return found == fixed_words().end() ? nullptr : &found->second;
}

// The buffer a word names (an element tensor, lse or a workspace buffer); false if none.
// Element tensors and lse come first: a workspace buffer cannot shadow them.
bool resolve_buffer(const std::string& word, const KernelRecord& kernel, BufferRef& ref) {
  const FixedWord* fixed = find_fixed(word);
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

// Resolves one parameter word to its source and the wire type the vocabulary gives it.
// Returns false for a word this runtime does not know. Precedence: element tensors and lse,
// then the kernel's workspace buffers, then the rest of the vocabulary, then its tensor maps.
bool resolve_word(const std::string& word, const KernelRecord& kernel, const StepRecord& step,
                  ParamSlot& slot) {
  BufferRef buffer;
  if (resolve_buffer(word, kernel, buffer)) {
    static const ParamSource kBufferSources[] = {ParamSource::Tensor, ParamSource::Lse,
                                                 ParamSource::Workspace};
    slot.source = kBufferSources[buffer.kind];
    slot.type = ParamType::Ptr;
    slot.index = buffer.index;
    return true;
  }
  if (const FixedWord* fixed = find_fixed(word)) {
    slot.source = fixed->source;
    slot.type = fixed->type;
    slot.index = fixed->index;
    slot.axis = fixed->axis;
    return true;
  }
  for (size_t m = 0; m < step.tensormaps.size(); ++m) {
    if (step.tensormaps[m].param == word) {
      slot.source = ParamSource::TensorMap;
      slot.type = ParamType::TensorMap;
      slot.index = uint8_t(m);
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

// Fills one step's plan; returns the defect, or "" when the step can be launched.
std::string plan_step(const Archive& archive, const KernelRecord& kernel, const StepRecord& step,
                      KernelPlan& kernel_plan, StepPlan& plan) {
  plan.record = &step;
  const bool hip = archive.arch().rfind("gfx", 0) == 0;
  const ImageRecord& image = archive.images()[step.image];
  if (image.kind != (hip ? "hsaco" : "cubin")) {
    return "its image is a " + image.kind + ", an " + archive.arch() + " archive needs " +
           (hip ? "hsaco" : "cubin");
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

  // Offsets are aligned against the parameters' address in the constant bank (CUDA), as ptxas
  // lays them out; only a tensor map's 64-byte alignment can tell the difference.
  const uint64_t base = hip ? 0 : kCudaParamBase;
  uint64_t offset = 0;
  for (const ParamRecord& param : step.params) {
    ParamSlot slot;
    slot.word = &param.word;
    if (!resolve_word(param.word, kernel, step, slot)) {
      return "parameter word '" + param.word + "' is not in this runtime's vocabulary — update the runtime";
    }
    const TypeInfo* declared = type_named(param.type);
    if (!declared || declared->type != slot.type) {
      return "parameter " + param.word + " has type " + param.type + ", the vocabulary says " +
             type_info(slot.type).name;
    }
    if (param.divisibility == 0 || (param.divisibility & (param.divisibility - 1)) != 0) {
      return "parameter " + param.word + " has divisibility " + std::to_string(param.divisibility);
    }
    slot.divisibility = param.divisibility;
    offset = align_up(base + offset, declared->align) - base;  // natural alignment
    slot.offset = uint32_t(offset);
    offset += declared->size;
    if (slot.source == ParamSource::Tensor) kernel_plan.uses_tensor[slot.index] = true;
    if (slot.source == ParamSource::Lse) kernel_plan.uses_lse = true;
    plan.params.push_back(slot);
    plan.offsets.push_back(slot.offset);
  }
  // The argument segment ends padded to 8 bytes (the cubin's EIATTR_PARAM_CBANK size).
  plan.packed_size = uint32_t(align_up(offset, 8));
  if (plan.packed_size != step.kernarg_size) {
    return "packed arguments are " + std::to_string(plan.packed_size) +
           " bytes but the image declares kernarg_size " + std::to_string(step.kernarg_size) +
           " — the archive and this runtime disagree on the kernel ABI; rebuild the bundle or "
           "update the runtime";
  }
  if (plan.packed_size > kMaxKernargBytes) return "has more than 4096 bytes of arguments";

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

uint64_t checked_multiply(uint64_t a, uint64_t b, const char* what) {
  uint64_t out;
  if (__builtin_mul_overflow(a, b, &out)) {
    fail(ATTNPACK_STATUS_UNSUPPORTED, std::string(what) + " overflows 64 bits");
  }
  return out;
}

}  // namespace

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
        int64_t stride = problem.tensors[slot.index].stride[slot.axis];
        std::memcpy(at, &stride, sizeof(stride));
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
