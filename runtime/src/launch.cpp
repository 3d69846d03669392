#include "launch.hpp"

#include <algorithm>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstring>
#include <optional>
#include <string_view>
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
constexpr int64_t kMaxMultiplier = int64_t(1) << 20;  // abi.MAX_MULTIPLIER

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

bool all_digits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A decimal literal as python/attnpack/abi.py's _FLOAT_LITERAL accepts it:
// -?(digits.digits* | .digits | digits)([eE][-+]?digits)?
bool is_decimal_literal(std::string_view text) {
  if (!text.empty() && text[0] == '-') text.remove_prefix(1);
  const size_t exponent = text.find_first_of("eE");
  const std::string_view mantissa = text.substr(0, exponent);
  const size_t point = mantissa.find('.');
  bool ok = point == std::string_view::npos
                ? all_digits(mantissa)
                : (point > 0 ? all_digits(mantissa.substr(0, point)) &&
                                   (point + 1 == mantissa.size() || all_digits(mantissa.substr(point + 1)))
                             : all_digits(mantissa.substr(1)));
  if (ok && exponent != std::string_view::npos) {
    std::string_view power = text.substr(exponent + 1);
    if (!power.empty() && (power[0] == '+' || power[0] == '-')) power.remove_prefix(1);
    ok = all_digits(power);
  }
  return ok;
}

// const:<literal> (abi.parse): an integer (i32, i64, f32; ptr when 0) or a decimal (f32).
bool parse_constant(std::string_view text, ParamSlot& slot, uint8_t& wires) {
  slot.source = ParamSource::Constant;
  const std::string_view digits = !text.empty() && text[0] == '-' ? text.substr(1) : text;
  if (all_digits(digits)) {
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), slot.constant);
    if (error != std::errc() || end != text.data() + text.size()) return false;  // past 64 bits
    wires = kWireI32 | kWireI64 | kWireF32 | (slot.constant == 0 ? kWirePtr : 0);
    return true;
  }
  if (!is_decimal_literal(text)) return false;
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) ||
      std::fabs(value) > double(FLT_MAX)) {
    return false;
  }
  slot.real_constant = value;
  slot.constant_is_real = true;
  wires = kWireF32;
  return true;
}

// (2.4) A word "<workspace>_stride_<b|h|s|d>": the element stride of the buffer's dim 0..3,
// contiguous float32, kept as the extents of the dims after it (abi.workspace_stride).
bool resolve_workspace_stride(const std::string& word, const KernelRecord& kernel,
                              const KernelPlan& kernel_plan, ParamSlot& slot) {
  constexpr std::string_view kStride = "_stride_";
  const size_t at = word.rfind(kStride);
  if (at == std::string::npos || at + kStride.size() + 1 != word.size()) return false;
  const int buffer = find_workspace(kernel, word.substr(0, at));
  const size_t dim = std::string_view("bhsd").find(word.back());
  if (buffer < 0 || dim == std::string_view::npos) return false;
  const std::vector<WorkspaceExtent>& shape = kernel_plan.workspace_shapes[buffer];
  if (dim >= shape.size()) return false;
  slot.source = ParamSource::WorkspaceStride;
  slot.index = uint8_t(buffer);
  slot.axis = uint8_t(dim);
  slot.inner.assign(shape.begin() + dim + 1, shape.end());
  return true;
}

// Resolves one parameter word to its source; `wires` gets the wire types it may take.
// Returns false for a word this runtime does not know. Precedence: the vocabulary (element
// tensors and lse cannot be shadowed), its parametric forms const:<literal> and <word>*<n>
// (abi.parse), then the kernel's workspace buffers and their strides, then its tensor maps.
bool resolve_word(const std::string& word, const KernelRecord& kernel, const KernelPlan& kernel_plan,
                  const StepRecord& step, ParamSlot& slot, uint8_t& wires) {
  if (const VocabularyWord* fixed = find_fixed(word)) {
    slot.source = fixed->source;
    slot.index = fixed->index;
    slot.axis = fixed->axis;
    slot.transform = fixed->transform;
    wires = fixed->wires;
    return true;
  }
  constexpr std::string_view kConstant = "const:";
  if (word.compare(0, kConstant.size(), kConstant) == 0) {
    return parse_constant(std::string_view(word).substr(kConstant.size()), slot, wires);
  }
  const size_t star = word.rfind('*');
  if (star != std::string::npos) {
    const std::string_view factor = std::string_view(word).substr(star + 1);
    const VocabularyWord* base = find_fixed(word.substr(0, star));
    int64_t multiplier = 0;
    if (base && all_digits(factor) && factor.size() <= 8) {
      std::from_chars(factor.data(), factor.data() + factor.size(), multiplier);
    }
    if (!base || !is_integer_source(base->source) || multiplier < 2 || multiplier > kMaxMultiplier) return false;
    slot.source = base->source;
    slot.index = base->index;
    slot.axis = base->axis;
    slot.transform = base->transform;
    slot.multiplier = multiplier;
    wires = base->wires;
    return true;
  }
  const int workspace = find_workspace(kernel, word);
  if (workspace >= 0) {
    slot.source = ParamSource::Workspace;
    slot.index = uint8_t(workspace);
    wires = kWirePtr;
    return true;
  }
  if (resolve_workspace_stride(word, kernel, kernel_plan, slot)) {
    wires = kWireI64 | kWireI32;
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
  if (step.shared > archive.target().shared_bytes) {
    return "asks for " + std::to_string(step.shared) + " bytes of shared memory; " + archive.arch() +
           " blocks have at most " + std::to_string(archive.target().shared_bytes);
  }
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
    if (!resolve_word(param.word, kernel, kernel_plan, step, slot, wires)) {
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
    if (slot.source == ParamSource::Constant && slot.type == ParamType::I32 &&
        (slot.constant < INT32_MIN || slot.constant > INT32_MAX)) {
      return "parameter " + param.word + " does not fit its i32 type";
    }
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
  // A tensor map no parameter passes would leave its descriptor's bytes zero in the launch (a
  // word matches the first map of its name, so a second map of one name is such a map too).
  for (size_t m = 0; m < step.tensormaps.size(); ++m) {
    const bool passed = std::any_of(plan.params.begin(), plan.params.end(), [m](const ParamSlot& slot) {
      return slot.source == ParamSource::TensorMap && slot.index == m;
    });
    if (!passed) return "tensor map " + step.tensormaps[m].param + " is passed by no parameter";
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

constexpr const char* kFactWords[] = {"B", "Hq", "Hkv", "Sq", "Sk", "D", "Hq_per_Hkv", "num_sms"};  // Fact order
constexpr const char* kRequirementOps[] = {"==", "!=", "<", "<=", ">", ">=", "multiple_of", "in"};  // Op order

std::optional<Fact> find_fact(const std::string& word) {
  int found = find_word(kFactWords, int(std::size(kFactWords)), word);
  if (found < 0) return std::nullopt;
  return Fact(found);
}

// One requirement's word, op and operand resolved, by the same rules as abi.Requirement.
std::string plan_requirement(const RequirementRecord& record, KernelPlan& plan) {
  using Operand = RequirementRecord::Operand;
  RequirementPlan requirement;
  requirement.record = &record;
  std::optional<Fact> fact = find_fact(record.word);
  if (!fact) return "tests '" + record.word + "', which is not in this runtime's vocabulary — update the runtime";
  const int op = find_word(kRequirementOps, int(std::size(kRequirementOps)), record.op);
  if (op < 0) return "has op '" + record.op + "', which this runtime does not know — update the runtime";
  requirement.fact = *fact;
  requirement.op = RequirementPlan::Op(op);
  const bool in = requirement.op == RequirementPlan::Op::In;
  const bool multiple_of = requirement.op == RequirementPlan::Op::MultipleOf;
  if (in != (record.operand == Operand::List)) return "has an operand its op " + record.op + " does not take";
  if (record.operand == Operand::Word) {
    std::optional<Fact> operand = find_fact(record.operand_word);
    if (!operand || multiple_of) return "has operand '" + record.operand_word + "', which its op does not take";
    requirement.operand_is_fact = true;
    requirement.operand_fact = *operand;
  }
  if (multiple_of && record.integer < 1) return "takes multiples of " + std::to_string(record.integer);
  plan.requires_num_sms |= requirement.fact == Fact::NumSms ||
                           (requirement.operand_is_fact && requirement.operand_fact == Fact::NumSms);
  plan.requirements.push_back(requirement);
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

bool is_integer_source(ParamSource source) {
  switch (source) {
    case ParamSource::Stride:
    case ParamSource::LseStride:
    case ParamSource::WorkspaceStride:
    case ParamSource::Size:
    case ParamSource::HeadDim:
    case ParamSource::GqaGroup:
    case ParamSource::Constant: return true;
    default: return false;
  }
}

bool integer_value(const ParamSlot& slot, const Problem& problem, int64_t& value) {
  int64_t base = 0, element_bytes = 1;
  switch (slot.source) {
    case ParamSource::Stride:
      base = problem.tensors[slot.index].stride[slot.axis];
      element_bytes = dtype_bytes(problem.dtype);
      break;
    case ParamSource::LseStride: {  // contiguous float32 [B, Hq, Sq]
      const int64_t strides[3] = {problem.sizes[kHq] * problem.sizes[kSq], problem.sizes[kSq], 1};
      base = strides[std::min<int>(slot.axis, 2)];
      element_bytes = 4;
      break;
    }
    case ParamSource::WorkspaceStride:
      base = 1;
      for (WorkspaceExtent extent : slot.inner) {
        if (__builtin_mul_overflow(base, workspace_extent(problem, extent), &base)) return false;
      }
      break;
    case ParamSource::Size: base = problem.sizes[slot.index]; break;
    case ParamSource::HeadDim: base = problem.head_dim; break;
    case ParamSource::GqaGroup: base = fact_value(Fact::GqaGroup, problem); break;
    case ParamSource::Constant: base = slot.constant; break;
    default: return false;
  }
  if (slot.transform == Transform::Bytes && __builtin_mul_overflow(base, element_bytes, &base)) return false;
  return !__builtin_mul_overflow(base, slot.multiplier, &value);
}

int64_t fact_value(Fact fact, const Problem& problem) {
  switch (fact) {
    case Fact::B: return problem.sizes[kB];
    case Fact::Hq: return problem.sizes[kHq];
    case Fact::Hkv: return problem.sizes[kHkv];
    case Fact::Sq: return problem.sizes[kSq];
    case Fact::Sk: return problem.sizes[kSk];
    case Fact::HeadDim: return problem.head_dim;
    case Fact::GqaGroup: return problem.sizes[kHkv] > 0 ? problem.sizes[kHq] / problem.sizes[kHkv] : 0;
    case Fact::NumSms: return problem.sizes[kNumSms];
  }
  return 0;
}

std::string requirement_failure(const KernelPlan& plan, const Problem& problem) {
  using Op = RequirementPlan::Op;
  for (const RequirementPlan& requirement : plan.requirements) {
    const RequirementRecord& record = *requirement.record;
    const int64_t value = fact_value(requirement.fact, problem);
    const int64_t operand =
        requirement.operand_is_fact ? fact_value(requirement.operand_fact, problem) : record.integer;
    // Without a device (explain, select on a machine without one) num_sms is 0: such a
    // requirement is not taken as met, so nothing is chosen that the device might refuse.
    const bool device_unknown = (requirement.fact == Fact::NumSms ||
                                 (requirement.operand_is_fact && requirement.operand_fact == Fact::NumSms)) &&
                                problem.sizes[kNumSms] == 0;
    bool met = false;
    switch (requirement.op) {
      case Op::Eq: met = value == operand; break;
      case Op::Ne: met = value != operand; break;
      case Op::Lt: met = value < operand; break;
      case Op::Le: met = value <= operand; break;
      case Op::Gt: met = value > operand; break;
      case Op::Ge: met = value >= operand; break;
      case Op::MultipleOf: met = value % operand == 0; break;  // operand >= 1 (plan_requirement)
      case Op::In: met = std::find(record.list.begin(), record.list.end(), value) != record.list.end(); break;
    }
    if (met && !device_unknown) continue;
    std::string text = "requires " + record.word + " " + record.op + " ";
    if (requirement.op == Op::In) {
      text += "{";
      for (size_t i = 0; i < record.list.size(); ++i) text += (i ? ", " : "") + std::to_string(record.list[i]);
      text += "}";
    } else {
      text += requirement.operand_is_fact ? record.operand_word : std::to_string(record.integer);
    }
    if (!record.why.empty()) text += " (" + record.why + ")";
    if (device_unknown) return text + ": the device's multiprocessor count is not known here (no device was asked)";
    if (requirement.fact == Fact::NumSms) return text + ": this device has " + std::to_string(value);
    text += ": " + record.word + "=" + std::to_string(value);
    if (requirement.operand_is_fact) text += ", " + record.operand_word + "=" + std::to_string(operand);
    return text;
  }
  return "";
}

// An integer in [lo, 2^20] written in decimal without a leading zero; nullopt otherwise.
static std::optional<int64_t> parse_extent_integer(const std::string& digits, int64_t lo) {
  if (digits.empty() || digits.size() > 7 || digits[0] == '0' ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const int64_t value = std::stoll(digits);
  if (value < lo || value > (int64_t(1) << 20)) return std::nullopt;
  return value;
}

// "Sq", "D", (2.2) "<size>/<n>" with n in 2..2^20, (2.6) "num_sms" and "const:<n>" with n in
// 1..2^20 (python/attnpack/abi.py workspace_extent).
static std::optional<WorkspaceExtent> parse_workspace_extent(const std::string& word) {
  WorkspaceExtent extent;
  static const std::string kConstant = "const:";
  if (word.compare(0, kConstant.size(), kConstant) == 0) {
    const std::optional<int64_t> value = parse_extent_integer(word.substr(kConstant.size()), 1);
    if (!value) return std::nullopt;
    extent.size = kWorkspaceConstant;
    extent.divisor = *value;
    return extent;
  }
  const size_t slash = word.find('/');
  const std::string name = word.substr(0, slash);
  if (slash == std::string::npos && name == "D") {
    extent.size = kWorkspaceHeadDim;
    return extent;
  }
  if (slash == std::string::npos && name == "num_sms") {
    extent.size = kNumSms;
    return extent;
  }
  const int size = find_word(kSizeWords, kSk + 1, name);
  if (size < 0) return std::nullopt;
  extent.size = SizeId(size);
  if (slash == std::string::npos) return extent;
  const std::optional<int64_t> divisor = parse_extent_integer(word.substr(slash + 1), 2);
  if (!divisor) return std::nullopt;
  extent.divisor = *divisor;
  return extent;
}

KernelPlan plan_kernel(const Archive& archive, const KernelRecord& kernel) {
  KernelPlan plan;
  plan.record = &kernel;
  for (const WorkspaceRecord& buffer : kernel.workspace) {
    std::vector<WorkspaceExtent> shape;
    for (const std::string& word : buffer.shape) {
      std::optional<WorkspaceExtent> extent = parse_workspace_extent(word);
      if (!extent) {
        plan.defect = "workspace " + buffer.name + " has size word '" + word +
                      "', which is not in this runtime's vocabulary — update the runtime";
        return plan;
      }
      shape.push_back(*extent);
      plan.workspace_needs_num_sms |= extent->size == kNumSms;
    }
    plan.workspace_shapes.push_back(std::move(shape));
  }
  for (size_t i = 0; i < kernel.requirements.size(); ++i) {
    std::string defect = plan_requirement(kernel.requirements[i], plan);
    if (!defect.empty()) {
      plan.defect = "requirement " + std::to_string(i) + " " + defect;
      return plan;
    }
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
      plan.workspace_needs_num_sms |= plan.steps[i].grid_uses_num_sms;
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

namespace {
bool grids_fit(const KernelPlan& plan, const Problem& problem) {
  for (const StepPlan& step : plan.steps) {
    if (!step.grid_uses_num_sms && !grid_overflow(step, problem).empty()) return false;
  }
  return true;
}
}  // namespace

int64_t batch_per_launch(const KernelPlan& plan, const Problem& problem) {
  const int64_t batch = problem.sizes[kB];
  if (grids_fit(plan, problem)) return batch;
  // A slice's LSE starts b0·Hq·Sq floats in: a multiple of 4 floats keeps it 16-byte aligned.
  const int64_t rows = (problem.sizes[kHq] * problem.sizes[kSq]) % 4;
  const int64_t step = rows == 0 ? 1 : rows == 2 ? 2 : 4;
  // The grids grow with B: the largest fitting multiple of `step` by bisection.
  Problem probe = problem;
  int64_t lo = 0, hi = batch / step;  // in units of `step`
  probe.sizes[kB] = hi * step;
  if (hi > 0 && grids_fit(plan, probe)) return hi * step;
  while (hi - lo > 1) {  // lo fits (0 trivially), hi does not
    const int64_t mid = lo + (hi - lo) / 2;
    probe.sizes[kB] = mid * step;
    (grids_fit(plan, probe) ? lo : hi) = mid;
  }
  return lo * step;
}

Problem batch_slice(const Problem& problem, int64_t b0, int64_t count) {
  Problem slice = problem;
  slice.sizes[kB] = count;
  const uint64_t element_bytes = dtype_bytes(problem.dtype);
  for (TensorView& view : slice.tensors) {
    if (view.address) view.address += uint64_t(b0 * view.stride[kAxisB]) * element_bytes;
  }
  if (slice.lse) slice.lse += uint64_t(b0 * problem.sizes[kHq] * problem.sizes[kSq]) * sizeof(float);
  return slice;
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
  for (const std::vector<WorkspaceExtent>& shape : plan.workspace_shapes) {
    offset = align_up(offset, kWorkspaceAlign);
    layout.buffer_offsets.push_back(offset);
    uint64_t bytes = sizeof(float);
    for (WorkspaceExtent extent : shape) {
      bytes = checked_multiply(bytes, uint64_t(workspace_extent(problem, extent)), "the workspace size");
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
      const std::vector<WorkspaceExtent>& shape = plan.workspace_shapes[map.buffer.index];
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
      case ParamSource::Constant:
        if (slot.constant_is_real) {
          const float value = float(slot.real_constant);
          std::memcpy(at, &value, sizeof(value));
          continue;
        }
        [[fallthrough]];
      case ParamSource::Stride:
      case ParamSource::LseStride:
      case ParamSource::WorkspaceStride:
      case ParamSource::HeadDim:
      case ParamSource::GqaGroup:
      case ParamSource::Size: {
        int64_t value = 0;
        integer_value(slot, problem, value);  // layout_mismatch refused values that do not fit
        if (slot.type == ParamType::I32) {
          const int32_t narrow = int32_t(value);
          std::memcpy(at, &narrow, sizeof(narrow));
        } else if (slot.type == ParamType::F32) {
          const float real = float(value);
          std::memcpy(at, &real, sizeof(real));
        } else {  // i64, or ptr for const:0
          std::memcpy(at, &value, sizeof(value));
        }
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
