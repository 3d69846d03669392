#include "archive.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>
#include <tuple>

#include <msgpack.hpp>
#include <zstd.h>

#include "error.hpp"

namespace attnpack {
namespace {

// magic, major (u16), minor (u16), meta size (u32), sha256(meta)
constexpr char kMagic[8] = {'A', 'T', 'T', 'N', 'P', 'A', 'C', 'K'};
constexpr uint64_t kVersionEnd = 12;    // the magic and version are readable from here on
constexpr uint64_t kPreambleSize = 48;
constexpr uint64_t kMaxImageBytes = uint64_t(1) << 31;  // a GPU code object is never this big
constexpr uint64_t kMaxIndexBytes = uint64_t(256) << 20;  // python/attnpack/archive/format.py

uint16_t load_le16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

// A msgpack value plus the path that leads to it ("index.kernels[3].steps[0].grid"), so a
// malformed field is reported by name. The path is kept as steps and spelled out only for an
// error message: opening an archive visits every node, and building each path string eagerly
// was most of the open time. Keys are literals or views into the parsed msgpack buffer, which
// outlives every Node.
class Node {
 public:
  Node(const msgpack::object& object, const char* root, const Archive& archive)
      : object_(object), root_(root), archive_(archive) {}

  [[noreturn]] void malformed(const std::string& what) const {
    fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
         archive_.describe(path() + " " + what +
                           " — the archive and this runtime disagree on format " +
                           std::to_string(kFormatMajor) + ".x; rebuild the bundle"));
  }

  // A well-formed field that contradicts the rest of the index (a buggy or tampered writer).
  [[noreturn]] void inconsistent(const std::string& what) const {
    fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT, archive_.describe(path() + " " + what + " — rebuild the bundle"));
  }

  const msgpack::object* find(std::string_view key) const {
    if (object_.type != msgpack::type::MAP) malformed("is not a map");
    const msgpack::object_map& map = object_.via.map;
    for (uint32_t i = 0; i < map.size; ++i) {
      const msgpack::object& k = map.ptr[i].key;
      if (k.type == msgpack::type::STR && k.via.str.size == key.size() &&
          std::memcmp(k.via.str.ptr, key.data(), key.size()) == 0) {
        return &map.ptr[i].val;
      }
    }
    return nullptr;
  }
  Node at(const char* key) const {
    const msgpack::object* value = find(key);
    if (!value) malformed(std::string("has no '") + key + "'");
    return child(*value, {key, 0});
  }
  std::optional<Node> maybe(const char* key) const {
    const msgpack::object* value = find(key);
    if (!value) return std::nullopt;
    return child(*value, {key, 0});
  }

  uint32_t length() const {
    if (object_.type != msgpack::type::ARRAY) malformed("is not an array");
    return object_.via.array.size;
  }
  Node item(uint32_t i) const {
    return child(object_.via.array.ptr[i], {std::string_view(), i});
  }

  // Map entries in stored order (for the informational config map).
  template <typename Visit>
  void each_entry(Visit visit) const {
    if (object_.type != msgpack::type::MAP) malformed("is not a map");
    for (uint32_t i = 0; i < object_.via.map.size; ++i) {
      const msgpack::object_kv& kv = object_.via.map.ptr[i];
      if (kv.key.type != msgpack::type::STR) malformed("has a key that is not a string");
      std::string_view key(kv.key.via.str.ptr, kv.key.via.str.size);
      visit(std::string(key), child(kv.val, {key, 0}));
    }
  }

  std::string str() const {
    if (object_.type != msgpack::type::STR) malformed("is not a string");
    return std::string(object_.via.str.ptr, object_.via.str.size);
  }
  uint64_t u64() const {
    if (object_.type != msgpack::type::POSITIVE_INTEGER) malformed("is not a non-negative integer");
    return object_.via.u64;
  }
  uint32_t u32() const {
    uint64_t value = u64();
    if (value > UINT32_MAX) malformed("does not fit 32 bits");
    return uint32_t(value);
  }
  int64_t i64() const {
    if (object_.type == msgpack::type::NEGATIVE_INTEGER) return object_.via.i64;
    const uint64_t value = u64();  // malformed unless an integer
    if (value > uint64_t(INT64_MAX)) malformed("does not fit a signed 64-bit integer");
    return int64_t(value);
  }
  bool is_str() const { return object_.type == msgpack::type::STR; }
  bool is_array() const { return object_.type == msgpack::type::ARRAY; }
  bool boolean() const {
    if (object_.type != msgpack::type::BOOLEAN) malformed("is not a boolean");
    return object_.via.boolean;
  }
  // A byte string (msgpack bin) as a view into the parsed buffer.
  std::string_view bytes() const {
    if (object_.type != msgpack::type::BIN) malformed("is not a byte string");
    return std::string_view(object_.via.bin.ptr, object_.via.bin.size);
  }
  Sha256Digest digest() const {
    if (object_.type != msgpack::type::BIN || object_.via.bin.size != 32) {
      malformed("is not a 32-byte sha256");
    }
    Sha256Digest out;
    std::memcpy(out.data(), object_.via.bin.ptr, 32);
    return out;
  }
  // A scalar as text, for informational maps.
  std::string text() const {
    switch (object_.type) {
      case msgpack::type::STR: return str();
      case msgpack::type::POSITIVE_INTEGER: return std::to_string(object_.via.u64);
      case msgpack::type::NEGATIVE_INTEGER: return std::to_string(object_.via.i64);
      case msgpack::type::BOOLEAN: return object_.via.boolean ? "true" : "false";
      case msgpack::type::FLOAT32:
      case msgpack::type::FLOAT64: {
        std::ostringstream out;
        out << object_.via.f64;
        return out.str();
      }
      default: return "?";
    }
  }

 private:
  struct Step {
    std::string_view key;  // empty: an array item
    uint32_t index;
  };
  // The deepest index path, index.kernels[i].steps[j].tensormaps[m].box[n], is 8 steps;
  // a deeper one (only in a malformed index) ends in "...".
  static constexpr size_t kMaxDepth = 8;

  Node child(const msgpack::object& object, Step step) const {
    Node out(object, root_, archive_);
    out.steps_ = steps_;
    out.depth_ = depth_;
    if (out.depth_ < kMaxDepth) out.steps_[out.depth_] = step;
    ++out.depth_;
    return out;
  }

  std::string path() const {
    std::string out = root_;
    for (size_t i = 0; i < std::min<size_t>(depth_, kMaxDepth); ++i) {
      const Step& step = steps_[i];
      out += step.key.empty() ? "[" + std::to_string(step.index) + "]" : "." + std::string(step.key);
    }
    if (depth_ > kMaxDepth) out += "...";
    return out;
  }

  const msgpack::object& object_;
  const char* root_;
  std::array<Step, kMaxDepth> steps_{};
  size_t depth_ = 0;
  const Archive& archive_;
};

FunctionalKey read_key(const Node& node) {
  FunctionalKey key;
  key.dtype = node.at("dtype").str();
  uint64_t head_dim = node.at("head_dim").u64();
  if (head_dim == 0 || head_dim > 4096) node.at("head_dim").malformed("is out of range");
  key.head_dim = int32_t(head_dim);
  key.causal = node.at("causal").boolean();
  return key;
}

std::array<uint32_t, 3> read_dim3(const Node& node) {
  if (node.length() != 3) node.malformed("does not have 3 entries");
  return {node.item(0).u32(), node.item(1).u32(), node.item(2).u32()};
}

TensorMapRecord read_tensormap(const Node& node) {
  TensorMapRecord map;
  map.param = node.at("param").str();
  map.tensor = node.at("tensor").str();
  Node box = node.at("box");
  for (uint32_t i = 0; i < box.length(); ++i) map.box.push_back(box.item(i).u32());
  if (auto swizzle = node.maybe("swizzle")) map.swizzle = swizzle->u32();
  if (auto l2 = node.maybe("l2_promotion")) map.l2_promotion = l2->u32();
  if (auto fill = node.maybe("oob_fill")) map.oob_fill = fill->str();
  return map;
}

StepRecord read_step(const Node& node, size_t num_images) {
  StepRecord step;
  step.name = node.at("name").str();
  step.image = node.at("image").u32();
  if (step.image >= num_images) node.at("image").malformed("is out of range");
  step.symbol = node.at("symbol").str();
  Node params = node.at("params");
  step.params.reserve(params.length());
  for (uint32_t i = 0; i < params.length(); ++i) {
    Node param = params.item(i);
    if (param.length() != 4) param.malformed("is not [word, type, divisibility, offset]");
    step.params.push_back({param.item(0).str(), param.item(1).str(), param.item(2).u32(), param.item(3).u32()});
  }
  Node grid = node.at("grid");
  if (grid.length() != 3) grid.malformed("does not have 3 dims");
  for (uint32_t d = 0; d < 3; ++d) {
    Node dim = grid.item(d);
    for (uint32_t i = 0; i < dim.length(); ++i) {
      Node factor = dim.item(i);
      if (factor.length() != 2) factor.malformed("is not [word, divisor]");
      uint64_t divisor = factor.item(1).u64();
      if (divisor == 0 || divisor > INT32_MAX) factor.item(1).malformed("is not a positive divisor");
      step.grid[d].push_back({factor.item(0).str(), int64_t(divisor)});
    }
  }
  step.block = read_dim3(node.at("block"));
  step.shared = node.at("shared").u32();
  step.cluster = read_dim3(node.at("cluster"));
  Node scratch = node.at("scratch");
  step.scratch.global_size = scratch.at("global_size").u64();
  step.scratch.global_align = scratch.at("global_align").u64();
  step.scratch.profile_size = scratch.at("profile_size").u64();
  step.scratch.profile_align = scratch.at("profile_align").u64();
  if (auto maps = node.maybe("tensormaps")) {
    for (uint32_t i = 0; i < maps->length(); ++i) step.tensormaps.push_back(read_tensormap(maps->item(i)));
  }
  step.kernarg_size = node.at("kernarg_size").u64();
  if (auto pdl = node.maybe("pdl")) step.pdl = pdl->boolean();
  return step;
}

RequirementRecord read_requirement(const Node& node) {
  if (node.length() != 4) node.malformed("is not [word, op, operand, why]");
  RequirementRecord record;
  record.word = node.item(0).str();
  record.op = node.item(1).str();
  const Node operand = node.item(2);
  if (operand.is_str()) {
    record.operand = RequirementRecord::Operand::Word;
    record.operand_word = operand.str();
  } else if (operand.is_array()) {
    record.operand = RequirementRecord::Operand::List;
    if (operand.length() < 1 || operand.length() > kMaxRequirementValues) {
      operand.malformed("does not hold 1 to " + std::to_string(kMaxRequirementValues) + " values");
    }
    for (uint32_t i = 0; i < operand.length(); ++i) record.list.push_back(operand.item(i).i64());
  } else {
    record.integer = operand.i64();  // malformed unless an integer
  }
  record.why = node.item(3).str();
  return record;
}

KernelRecord read_kernel(const Node& node, size_t num_images, const std::vector<FamilyRecord>& families) {
  KernelRecord kernel;
  kernel.name = node.at("name").str();
  kernel.family = node.at("family").str();
  auto family = std::find_if(families.begin(), families.end(),
                             [&](const FamilyRecord& f) { return f.name == kernel.family; });
  if (family == families.end()) node.at("family").inconsistent("names a family with no entry in index.families");
  kernel.family_index = uint32_t(family - families.begin());
  kernel.deterministic = node.at("deterministic").boolean();
  kernel.op = node.at("op").str();
  kernel.key = read_key(node.at("key"));
  if (auto config = node.maybe("config")) {
    config->each_entry([&](const std::string& key, const Node& value) {
      if (!kernel.config.empty()) kernel.config += " ";
      kernel.config += key + "=" + value.text();
    });
  }
  Node workspace = node.at("workspace");
  for (uint32_t i = 0; i < workspace.length(); ++i) {
    Node buffer = workspace.item(i);
    WorkspaceRecord record;
    record.name = buffer.at("name").str();
    Node shape = buffer.at("shape");
    for (uint32_t j = 0; j < shape.length(); ++j) record.shape.push_back(shape.item(j).str());
    kernel.workspace.push_back(std::move(record));
  }
  Node steps = node.at("steps");
  if (steps.length() == 0) steps.malformed("is empty");
  for (uint32_t i = 0; i < steps.length(); ++i) kernel.steps.push_back(read_step(steps.item(i), num_images));
  // Format 2.1. Its shape is checked here; its words and ops when the kernel is planned, so a
  // newer word makes only this kernel unlaunchable (launch.cpp).
  if (auto requirements = node.maybe("requires")) {
    for (uint32_t i = 0; i < requirements->length(); ++i) {
      kernel.requirements.push_back(read_requirement(requirements->item(i)));
    }
  }
  return kernel;
}

// Bucket boundaries of one axis: ascending, each at least 1 (python/attnpack/tune/buckets.py).
std::vector<uint32_t> read_bounds(const Node& node, bool required) {
  std::vector<uint32_t> bounds;
  for (uint32_t i = 0; i < node.length(); ++i) {
    const uint32_t value = node.item(i).u32();
    if (value < 1) node.item(i).inconsistent("is 0; bucket boundaries start at 1");
    if (!bounds.empty() && value <= bounds.back()) {
      node.item(i).inconsistent("is not above the boundary before it (" + std::to_string(bounds.back()) + ")");
    }
    bounds.push_back(value);
  }
  if (required && bounds.empty()) node.inconsistent("is empty, but the tuning map has entries");
  return bounds;
}

bool is_boundary(uint32_t value, const std::vector<uint32_t>& bounds) {
  return std::binary_search(bounds.begin(), bounds.end(), value);
}

// One `entries` array of the tuning map: the arch-wide one (`gpu` empty) or one GPU's in
// `by_gpu` (`gpu` names it in every message). Every entry must name a kernel of the index with
// the entry's op and functional key, sit on the boundaries of `buckets` (whose bounds are
// read), and have a key of its own within the array.
std::vector<TuningEntry> read_tuning_entries(const Node& entries, const TuningRecord& buckets, const std::string& gpu,
                                             const std::vector<KernelRecord>& kernels,
                                             const std::unordered_map<std::string, uint32_t>& kernel_index) {
  std::vector<TuningEntry> out;
  using Key = std::tuple<std::string, std::string, int32_t, bool, uint32_t, uint32_t, uint32_t, uint32_t>;
  std::map<Key, uint32_t> seen;  // key -> first entry with it
  for (uint32_t i = 0; i < entries.length(); ++i) {
    const Node item = entries.item(i);
    TuningEntry entry;
    entry.op = item.at("op").str();
    entry.key = read_key(item);
    entry.gqa = item.at("gqa").u32();
    entry.sq = item.at("sq").u32();
    entry.sk = item.at("sk").u32();
    const std::optional<Node> streams = item.maybe("streams");
    if (streams) entry.streams = streams->u32();
    const std::string name = item.at("kernel").str();
    // Spelled out only for an error message (as Node paths are): open reads every entry.
    // "(fwd fp16 d64 full gqa1 sq128 sk128) ", or "(NVIDIA H100 80GB HBM3: fwd ...) " for a GPU's.
    auto where = [&] {
      return "(" + (gpu.empty() ? std::string() : gpu + ": ") + key_text(entry.op, entry.key) + " gqa" +
             std::to_string(entry.gqa) + " sq" + std::to_string(entry.sq) + " sk" + std::to_string(entry.sk) +
             (streams ? " streams" + std::to_string(entry.streams) : std::string()) + ") ";
    };
    if (buckets.streams_bounds.empty() && streams) {
      streams->inconsistent(where() + "has a streams class, but buckets has no streams axis");
    }
    if (!buckets.streams_bounds.empty() && !is_boundary(entry.streams, buckets.streams_bounds)) {
      item.inconsistent(where() + (streams ? "has streams " + std::to_string(entry.streams) +
                                                 ", which is not a boundary of buckets.streams"
                                           : std::string("has no streams class, but buckets has a streams axis")));
    }
    for (auto [field, value, axis] : {std::tuple{"gqa", entry.gqa, "gqa"}, std::tuple{"sq", entry.sq, "seqlen"},
                                      std::tuple{"sk", entry.sk, "seqlen"}}) {
      if (!is_boundary(value, std::strcmp(axis, "gqa") == 0 ? buckets.gqa_bounds : buckets.seqlen_bounds)) {
        item.inconsistent(where() + "has " + field + " " + std::to_string(value) +
                          ", which is not a boundary of buckets." + axis);
      }
    }
    // A kernel of the index for the entry's op and functional key.
    auto entry_kernel = [&](const Node& node, const std::string& kernel_name) {
      auto found = kernel_index.find(kernel_name);
      if (found == kernel_index.end()) {
        node.inconsistent(where() + "names kernel " + kernel_name + ", which is not in the index");
      }
      const KernelRecord& kernel = kernels[found->second];
      if (kernel.op != entry.op || kernel.key.dtype != entry.key.dtype || kernel.key.head_dim != entry.key.head_dim ||
          kernel.key.causal != entry.key.causal) {
        node.inconsistent(where() + "names kernel " + kernel_name + ", which is for " + key_text(kernel.op, kernel.key));
      }
      return found->second;
    };
    entry.kernel = entry_kernel(item, name);
    if (const std::optional<Node> alternate = item.maybe("deterministic_kernel")) {
      const std::string alternate_name = alternate->str();
      entry.deterministic_kernel = entry_kernel(*alternate, alternate_name);
      if (!kernels[*entry.deterministic_kernel].deterministic) {
        alternate->inconsistent(where() + "names kernel " + alternate_name + " as deterministic, which it is not");
      }
    }
    auto [first, fresh] = seen.emplace(Key{entry.op, entry.key.dtype, entry.key.head_dim, entry.key.causal,
                                           entry.gqa, entry.sq, entry.sk, entry.streams}, i);
    if (!fresh) item.inconsistent(where() + "repeats the key of entries[" + std::to_string(first->second) + "]");
    out.push_back(std::move(entry));
  }
  return out;
}

// A tuning map's (or one GPU's list's) optional `provenance`: informational text by field.
std::map<std::string, std::string> read_provenance(const Node& node) {
  std::map<std::string, std::string> out;
  if (auto provenance = node.maybe("provenance")) {
    provenance->each_entry([&](const std::string& key, const Node& value) { out[key] = value.text(); });
  }
  return out;
}

// The index's `tuning` map (docs/ARCHIVE.md): the buckets, the arch-wide entries and (2.7) the
// entries of each GPU model in `by_gpu`, sorted by the GPU's name, one list per name.
TuningRecord read_tuning(const Node& node, const std::vector<KernelRecord>& kernels,
                         const std::unordered_map<std::string, uint32_t>& kernel_index) {
  TuningRecord tuning;
  tuning.provenance = read_provenance(node);
  const std::optional<Node> entries = node.maybe("entries");
  const std::optional<Node> by_gpu = node.maybe("by_gpu");
  const bool has_entries = entries && entries->length() > 0;
  // The first GPU list with entries: they need the buckets as much as the arch-wide ones do.
  std::optional<uint32_t> gpu_with_entries;
  for (uint32_t i = 0; by_gpu && i < by_gpu->length() && !gpu_with_entries; ++i) {
    if (by_gpu->item(i).at("entries").length() > 0) gpu_with_entries = i;
  }
  const bool needs_buckets = has_entries || gpu_with_entries;
  if (gpu_with_entries && !has_entries) {  // else the arch-wide entries' messages below apply
    const std::optional<Node> buckets = node.maybe("buckets");
    if (!buckets || !buckets->find("seqlen") || !buckets->find("gqa")) {
      const Node item = by_gpu->item(*gpu_with_entries);
      item.inconsistent("(" + item.at("gpu").str() + ") has entries, but the tuning map has no seqlen and gqa buckets");
    }
  }
  // Entries need both axes; without entries (no database at build time) they may be absent.
  const std::optional<Node> buckets = needs_buckets ? std::optional<Node>(node.at("buckets")) : node.maybe("buckets");
  if (buckets) {
    for (auto [axis, bounds] : {std::pair{"seqlen", &tuning.seqlen_bounds}, std::pair{"gqa", &tuning.gqa_bounds}}) {
      const std::optional<Node> list = needs_buckets ? std::optional<Node>(buckets->at(axis)) : buckets->maybe(axis);
      if (list) *bounds = read_bounds(*list, needs_buckets);
    }
    // 2.3: the streams axis is optional; with it every entry names its class.
    if (const std::optional<Node> list = buckets->maybe("streams")) {
      tuning.streams_bounds = read_bounds(*list, needs_buckets);
    }
  }
  if (has_entries) tuning.entries = read_tuning_entries(*entries, tuning, "", kernels, kernel_index);
  if (!by_gpu) return tuning;

  for (uint32_t i = 0; i < by_gpu->length(); ++i) {
    const Node item = by_gpu->item(i);
    const Node name = item.at("gpu");
    GpuTuning gpu;
    gpu.gpu = name.str();
    if (gpu.gpu.empty()) name.inconsistent("is empty; it must be the GPU's name as its driver reports it");
    // Sorted and distinct, as the writer leaves them: a device matches at most one list.
    if (i > 0) {
      const std::string& before = tuning.by_gpu.back().gpu;
      const std::string other = "by_gpu[" + std::to_string(i - 1) + "]";
      if (gpu.gpu == before) name.inconsistent("(" + gpu.gpu + ") repeats the GPU of " + other);
      if (gpu.gpu < before) {
        name.inconsistent("(" + gpu.gpu + ") sorts before the GPU of " + other + " (" + before +
                          "); by_gpu must be sorted by gpu");
      }
    }
    gpu.provenance = read_provenance(item);
    gpu.entries = read_tuning_entries(item.at("entries"), tuning, gpu.gpu, kernels, kernel_index);
    tuning.by_gpu.push_back(std::move(gpu));
  }
  return tuning;
}

// Unpacks one msgpack document that must fill `size` bytes exactly.
msgpack::object_handle unpack_document(const uint8_t* bytes, uint64_t size, const Archive& archive,
                                       const char* what) {
  try {
    size_t offset = 0;
    msgpack::object_handle handle =
        msgpack::unpack(reinterpret_cast<const char*>(bytes), size_t(size), offset);
    if (offset != size) {
      fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
           archive.describe(std::string(what) + " has " + std::to_string(size - offset) +
                            " stray bytes after its msgpack map — rebuild the bundle"));
    }
    return handle;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
         archive.describe(std::string(what) + " is not valid msgpack (" + e.what() +
                          ") — rebuild the bundle"));
  }
}

}  // namespace

MappedFile::MappedFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fail(ATTNPACK_STATUS_ARCHIVE_NOT_FOUND,
         "archive " + path + " cannot be opened (" + std::strerror(errno) + ") — check the path");
  }
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    fail(ATTNPACK_STATUS_ARCHIVE_NOT_FOUND, "archive " + path + " is not a regular file");
  }
  size_ = uint64_t(info.st_size);
  if (size_ > 0) {
    void* mapping = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      int error = errno;
      ::close(fd);
      fail(ATTNPACK_STATUS_ARCHIVE_NOT_FOUND,
           "archive " + path + " cannot be mapped (" + std::strerror(error) + ")");
    }
    data_ = static_cast<const uint8_t*>(mapping);
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

std::string key_text(const std::string& op, const FunctionalKey& key) {
  return op + " " + key.dtype + " d" + std::to_string(key.head_dim) + (key.causal ? " causal" : " full");
}

std::optional<uint32_t> Archive::kernel_index(const std::string& name) const {
  auto found = kernel_index_.find(name);
  if (found == kernel_index_.end()) return std::nullopt;
  return found->second;
}

std::string Archive::describe(const std::string& problem) const {
  return "archive " + path_ + ": " + problem;
}

Archive::Archive(const std::string& path) : path_(path), file_(path) {
  const uint8_t* data = file_.data();
  const uint64_t size = file_.size();
  auto truncated = [&](const std::string& what, uint64_t end) {
    fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
         describe(what + " ends at byte " + std::to_string(end) + " but the file has " +
                  std::to_string(size) + " bytes (truncated?) — re-copy or rebuild the bundle"));
  };
  if (size < sizeof(kMagic)) truncated("the magic", sizeof(kMagic));
  if (std::memcmp(data, kMagic, sizeof(kMagic)) != 0) {
    fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
         describe("is not an attnpack archive (no ATTNPACK magic) — point at an attnpack-*.apk file"));
  }
  if (size < kVersionEnd) truncated("the format version", kVersionEnd);
  format_major_ = load_le16(data + 8);
  format_minor_ = load_le16(data + 10);
  if (format_major_ != kFormatMajor) {
    fail(ATTNPACK_STATUS_ARCHIVE_VERSION,
         "archive " + path_ + " has format " + std::to_string(format_major_) + "." +
             std::to_string(format_minor_) + "; this runtime reads " +
             std::to_string(kFormatMajor) + ".x — rebuild the bundle or update the runtime");
  }
  if (size < kPreambleSize) truncated("the preamble", kPreambleSize);
  const uint64_t meta_size = load_le32(data + 12);
  if (kPreambleSize + meta_size > size) truncated("the meta map", kPreambleSize + meta_size);
  if (sha256(data + kPreambleSize, meta_size) != *reinterpret_cast<const Sha256Digest*>(data + 16)) {
    fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
         describe("meta map fails its sha256 check (corrupt header) — re-copy or rebuild the bundle"));
  }
  parse_meta(data + kPreambleSize, meta_size);
  if (index_offset_ > size || index_size_ > size - index_offset_) {
    truncated("the index", index_offset_ + index_size_);
  }
  if (sha256(data + index_offset_, index_size_) != index_sha256_) {
    fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
         describe("index fails its sha256 check (corrupt index) — re-copy or rebuild the bundle"));
  }
  // 3.0: the index is one zstd frame, inflated here to the size the meta says, parsed and let go
  const uint8_t* stored = data + index_offset_;
  const unsigned long long content_size = ZSTD_getFrameContentSize(stored, index_size_);
  if (index_raw_size_ == 0 || index_raw_size_ > kMaxIndexBytes || content_size != index_raw_size_) {
    fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
         describe("index is not a zstd frame of the " + std::to_string(index_raw_size_) +
                  " bytes the meta says (corrupt index) — re-copy or rebuild the bundle"));
  }
  std::vector<uint8_t> index(index_raw_size_);
  const size_t inflated = ZSTD_decompress(index.data(), index.size(), stored, index_size_);
  if (ZSTD_isError(inflated) || inflated != index.size()) {
    fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
         describe(std::string("index does not inflate (") +
                  (ZSTD_isError(inflated) ? ZSTD_getErrorName(inflated) : "short") +
                  ") — re-copy or rebuild the bundle"));
  }
  parse_index(index.data(), index.size());
  check_layout();
}

void Archive::FreeDictionary::operator()(ZSTD_DDict_s* dictionary) const { ZSTD_freeDDict(dictionary); }

void Archive::parse_meta(const uint8_t* bytes, uint64_t size) {
  msgpack::object_handle handle = unpack_document(bytes, size, *this, "meta");
  Node meta(handle.get(), "meta", *this);
  arch_ = meta.at("arch").str();
  // Any arch is welcome; what the runtime needs of it is the vendor (which driver) and the
  // facts the meta carries.
  Node target = meta.at("target");
  const std::string vendor = target.at("vendor").str();
  if (vendor == "nvidia") {
    target_.vendor = Vendor::Nvidia;
  } else if (vendor == "amd") {
    target_.vendor = Vendor::Amd;
  } else {
    fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
         describe("targets " + arch_ + " of vendor '" + vendor +
                  "', for which this runtime has no driver (it knows nvidia and amd) — update the runtime"));
  }
  target_.image_kind = target.at("image_kind").str();
  if (target_.image_kind != (target_.vendor == Vendor::Nvidia ? "cubin" : "hsaco")) {
    target.at("image_kind").inconsistent("is " + target_.image_kind + ", which the " + vendor + " driver does not load");
  }
  target_.wave_size = target.at("wave_size").u32();
  if (target_.wave_size != (target_.vendor == Vendor::Nvidia ? 32u : 64u)) {
    target.at("wave_size").inconsistent("is " + std::to_string(target_.wave_size) + ", which no " + vendor + " GPU has");
  }
  target_.shared_bytes = target.at("shared_bytes").u32();
  bundle_version_ = meta.at("bundle_version").str();
  meta.at("compilers").each_entry(
      [&](const std::string& name, const Node& version) { compilers_[name] = version.str(); });
  index_offset_ = meta.at("index_offset").u64();
  index_size_ = meta.at("index_size").u64();
  index_sha256_ = meta.at("index_sha256").digest();
  index_raw_size_ = meta.at("index_raw_size").u64();
  images_offset_ = meta.at("images_offset").u64();
}

void Archive::parse_index(const uint8_t* bytes, uint64_t size) {
  msgpack::object_handle handle = unpack_document(bytes, size, *this, "index");
  Node index(handle.get(), "index", *this);
  Node images = index.at("images");
  for (uint32_t i = 0; i < images.length(); ++i) {
    Node node = images.item(i);
    ImageRecord image;
    image.kind = node.at("kind").str();
    image.symbol = node.at("symbol").str();
    image.offset = node.at("offset").u64();
    image.size = node.at("size").u64();
    image.raw_size = node.at("raw_size").u64();
    image.sha256 = node.at("sha256").digest();
    images_.push_back(std::move(image));
  }
  index.at("families").each_entry([&](const std::string& name, const Node& node) {
    FamilyRecord family;
    family.name = name;
    family.backend = node.at("backend").str();
    family.priority = node.at("priority").u32();
    Node provenance = node.at("provenance");
    family.license = provenance.at("license").str();
    family.origin = provenance.at("origin").str();
    families_.push_back(std::move(family));
  });
  Node kernels = index.at("kernels");
  for (uint32_t i = 0; i < kernels.length(); ++i) {
    kernels_.push_back(read_kernel(kernels.item(i), images_.size(), families_));
    if (!kernel_index_.emplace(kernels_.back().name, i).second) {
      kernels.item(i).at("name").inconsistent("repeats kernel name " + kernels_.back().name);
    }
  }
  Node selection = index.at("selection");
  for (uint32_t i = 0; i < selection.length(); ++i) {
    Node node = selection.item(i);
    SelectionRecord entry;
    entry.op = node.at("op").str();
    entry.key = read_key(node);
    std::string name = node.at("kernel").str();
    auto found = kernel_index_.find(name);
    if (found == kernel_index_.end()) {
      node.at("kernel").malformed("names kernel " + name + ", which is not in the index");
    }
    entry.kernel = found->second;
    const KernelRecord& kernel = kernels_[entry.kernel];
    if (kernel.op != entry.op || kernel.key.dtype != entry.key.dtype ||
        kernel.key.head_dim != entry.key.head_dim || kernel.key.causal != entry.key.causal) {
      node.malformed("points at " + name + ", whose op or key differs");
    }
    selection_.push_back(std::move(entry));
  }
  // An index written before the tuning database has no `tuning`: no tuned entries.
  if (auto tuning = index.maybe("tuning")) tuning_ = read_tuning(*tuning, kernels_, kernel_index_);
  if (auto dictionary = index.maybe("dictionary")) {
    const std::string_view bytes = dictionary->bytes();
    dictionary_.reset(ZSTD_createDDict(bytes.data(), bytes.size()));  // copies the bytes
    if (!dictionary_) dictionary->malformed("is not a zstd dictionary");
    dictionary_id_ = ZSTD_getDictID_fromDDict(dictionary_.get());
  }
}

void Archive::check_layout() {
  const uint64_t size = file_.size();
  uint64_t end = images_offset_;
  if (images_offset_ > size) {
    fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
         describe("images start at byte " + std::to_string(images_offset_) + " past the end of the " +
                  std::to_string(size) + "-byte file (truncated?) — re-copy or rebuild the bundle"));
  }
  for (size_t i = 0; i < images_.size(); ++i) {
    const ImageRecord& image = images_[i];
    uint64_t room = size - images_offset_;
    if (image.offset > room || image.size > room - image.offset) {
      fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
           describe("image " + std::to_string(i) + " (" + image.symbol + ") lies past the end of the " +
                    std::to_string(size) + "-byte file (truncated?) — re-copy or rebuild the bundle"));
    }
    end = std::max(end, images_offset_ + image.offset + image.size);
  }
  if (end != size) {
    fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
         describe("has " + std::to_string(size - end) +
                  " bytes after its last image — re-copy or rebuild the bundle"));
  }
}

std::vector<uint8_t> Archive::image_bytes(uint32_t index) const {
  const ImageRecord& image = images_.at(index);
  std::string users;
  for (const KernelRecord& kernel : kernels_) {
    for (const StepRecord& step : kernel.steps) {
      if (step.image == index) {
        users += (users.empty() ? "" : ", ") + kernel.name;
        break;
      }
    }
  }
  auto corrupt = [&](const std::string& problem) {
    fail(ATTNPACK_STATUS_ARCHIVE_CORRUPT,
         describe("image " + std::to_string(index) + " (" + image.symbol + ", used by " + users +
                  ") " + problem + " — re-copy or rebuild the bundle"));
  };
  const uint8_t* compressed = file_.data() + images_offset_ + image.offset;
  unsigned long long content_size = ZSTD_getFrameContentSize(compressed, image.size);
  if (content_size == ZSTD_CONTENTSIZE_ERROR || content_size == ZSTD_CONTENTSIZE_UNKNOWN) {
    corrupt("is not a zstd frame with its content size");
  }
  if (image.raw_size > kMaxImageBytes) corrupt("claims an implausible size");
  if (content_size != image.raw_size) {
    corrupt("inflates to " + std::to_string(content_size) + " bytes, the index says " +
            std::to_string(image.raw_size));
  }
  const unsigned frame_dictionary = ZSTD_getDictID_fromFrame(compressed, image.size);
  if (frame_dictionary != dictionary_id_) {
    corrupt("was compressed with zstd dictionary " + std::to_string(frame_dictionary) + ", the index has " +
            (dictionary_ ? "dictionary " + std::to_string(dictionary_id_) : std::string("none")));
  }
  std::vector<uint8_t> raw(image.raw_size);
  size_t written;
  if (dictionary_) {
    std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> context(ZSTD_createDCtx(), ZSTD_freeDCtx);
    if (!context) fail(ATTNPACK_STATUS_INTERNAL, describe("no memory for a zstd context"));
    written = ZSTD_decompress_usingDDict(context.get(), raw.data(), raw.size(), compressed, image.size,
                                         dictionary_.get());
  } else {
    written = ZSTD_decompress(raw.data(), raw.size(), compressed, image.size);
  }
  if (ZSTD_isError(written)) corrupt(std::string("does not inflate (") + ZSTD_getErrorName(written) + ")");
  if (written != raw.size()) corrupt("inflates short");
  if (sha256(raw.data(), raw.size()) != image.sha256) corrupt("fails its sha256 check");
  return raw;
}

}  // namespace attnpack
