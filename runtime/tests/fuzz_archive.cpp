// A deterministic mutation fuzzer for the archive reader: an archive is untrusted input to a
// library linked into PyTorch, so no bundle file may crash, hang or read out of bounds.
//
//   attnpack_fuzz_archive ARCHIVE COUNT SEED [ACCEPTED_DIR]
//
// Each mutant of ARCHIVE is one of:
//   - raw: bit flips or a run of bytes overwritten, anywhere in the file;
//   - truncation at a random length;
//   - preamble: its version or meta-size field edited;
//   - meta / index: one msgpack node edited (an integer set to a boundary value, a string
//     swapped for another launch-spec word or cut short, an array or map shortened, grown or
//     reordered, a value replaced by nil), then re-encoded (the index re-compressed, format 3.0)
//     with every length, offset and hash recomputed, as a buggy or hostile writer would do, so
//     the edit reaches the parser past the checksums. Half of the index mutants start from the index with a by_gpu list (format
//     2.7) when the archive has tuning entries and no such list: a copy of its entries for a
//     GPU the recording driver then pretends to be ($ATTNPACK_RECORDING_GPU_NAME), so that
//     selection goes through a GPU's entries too.
// The mutant is opened with the recording driver. It must be refused with a status and a
// message, or open; an opened one is checked by attnpack_verify (every launch spec launchable,
// every image inflated and hashed) and a grid of problems is selected, explained, sized and
// launched through it. Any crash, sanitizer report or
// hang (a 10 s alarm per mutant) fails the run. Opened mutants that pass attnpack_verify are
// "accepted"; with ACCEPTED_DIR, each distinct one is written there so that a test can hold
// `attnpack verify` to the same verdict.
//
// Run under AddressSanitizer and UndefinedBehaviorSanitizer by runtime/tests/run_cpu_tests_asan.sh.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <msgpack.hpp>
#include <zstd.h>

#include "attnpack/attnpack.h"
#include "sha256.hpp"

namespace {

using Bytes = std::vector<uint8_t>;
constexpr size_t kPreamble = 48;

uint32_t le32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (uint32_t(p[3]) << 24); }
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const Bytes& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

Bytes pack(const msgpack::object& object) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, object);
  return Bytes(buffer.data(), buffer.data() + buffer.size());
}

// The parts of an archive, split by its own (valid) preamble and meta: the index as stored
// (one zstd frame) and inflated.
struct Parts {
  Bytes meta, stored_index, index, images;
};

const msgpack::object* map_value(const msgpack::object& map, const char* key) {
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const msgpack::object_kv& kv = map.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR && kv.key.via.str.size == std::strlen(key) &&
        std::memcmp(kv.key.via.str.ptr, key, kv.key.via.str.size) == 0) {
      return &kv.val;
    }
  }
  return nullptr;
}

Parts split(const Bytes& file) {
  Parts parts;
  const uint32_t meta_size = le32(file.data() + 12);
  parts.meta.assign(file.begin() + kPreamble, file.begin() + kPreamble + meta_size);
  msgpack::object_handle meta = msgpack::unpack(reinterpret_cast<const char*>(parts.meta.data()), parts.meta.size());
  const uint64_t index_offset = map_value(meta.get(), "index_offset")->via.u64;
  const uint64_t index_size = map_value(meta.get(), "index_size")->via.u64;
  parts.stored_index.assign(file.begin() + index_offset, file.begin() + index_offset + index_size);
  parts.index.resize(map_value(meta.get(), "index_raw_size")->via.u64);
  ZSTD_decompress(parts.index.data(), parts.index.size(), parts.stored_index.data(), parts.stored_index.size());
  parts.images.assign(file.begin() + index_offset + index_size, file.end());
  return parts;
}

// The index as a writer stores it: one zstd frame with its content size (at a fast level here:
// the bytes differ from the writer's, the reader's work does not).
Bytes deflate(const Bytes& index) {
  Bytes out(ZSTD_compressBound(index.size()));
  out.resize(ZSTD_compress(out.data(), out.size(), index.data(), index.size(), 1));
  return out;
}

// The preamble for `meta`, then meta, index and images.
Bytes assemble(const Bytes& original, const Bytes& meta, const Bytes& index, const Bytes& images) {
  Bytes out(original.begin(), original.begin() + kPreamble);
  put32(out.data() + 12, uint32_t(meta.size()));
  attnpack::Sha256Digest digest = attnpack::sha256(meta.data(), meta.size());
  std::memcpy(out.data() + 16, digest.data(), 32);
  out.insert(out.end(), meta.begin(), meta.end());
  out.insert(out.end(), index.begin(), index.end());
  out.insert(out.end(), images.begin(), images.end());
  return out;
}

msgpack::object text_object(const char* text) {
  msgpack::object out;
  out.type = msgpack::type::STR;
  out.via.str.ptr = text;
  out.via.str.size = uint32_t(std::strlen(text));
  return out;
}

// The GPU a grafted by_gpu list is for, and the recording driver's name then.
constexpr const char* kFuzzGpu = "attnpack fuzz GPU";

// `index` with a by_gpu list in its tuning map (format 2.7): the GPU of its first list when it
// has one already (then `index` itself), else a copy of its arch-wide entries for kFuzzGpu.
// `gpu` receives the GPU's name; empty (and `index` itself) when there are no entries to copy.
Bytes with_gpu_tuning(const Bytes& index, std::string& gpu) {
  msgpack::object_handle handle = msgpack::unpack(reinterpret_cast<const char*>(index.data()), index.size());
  msgpack::zone& zone = *handle.zone();
  msgpack::object* tuning = const_cast<msgpack::object*>(map_value(handle.get(), "tuning"));
  if (!tuning || tuning->type != msgpack::type::MAP) return index;
  if (const msgpack::object* lists = map_value(*tuning, "by_gpu")) {
    if (lists->type == msgpack::type::ARRAY && lists->via.array.size > 0) {
      const msgpack::object* name = map_value(lists->via.array.ptr[0], "gpu");
      if (name && name->type == msgpack::type::STR) gpu.assign(name->via.str.ptr, name->via.str.size);
    }
    return index;
  }
  const msgpack::object* entries = map_value(*tuning, "entries");
  if (!entries || entries->type != msgpack::type::ARRAY || entries->via.array.size == 0) return index;
  // {gpu, provenance: {}, entries}: the same entries, so the grafted archive is valid.
  auto* list = static_cast<msgpack::object_kv*>(zone.allocate_align(sizeof(msgpack::object_kv) * 3));
  list[0] = {text_object("gpu"), text_object(kFuzzGpu)};
  list[1].key = text_object("provenance");
  list[1].val.type = msgpack::type::MAP;
  list[1].val.via.map = {0, nullptr};
  list[2] = {text_object("entries"), *entries};
  auto* item = static_cast<msgpack::object*>(zone.allocate_align(sizeof(msgpack::object)));
  item->type = msgpack::type::MAP;
  item->via.map = {3, list};
  const uint32_t size = tuning->via.map.size;
  auto* grown = static_cast<msgpack::object_kv*>(zone.allocate_align(sizeof(msgpack::object_kv) * (size + 1)));
  std::memcpy(static_cast<void*>(grown), tuning->via.map.ptr, sizeof(msgpack::object_kv) * size);
  grown[size].key = text_object("by_gpu");
  grown[size].val.type = msgpack::type::ARRAY;
  grown[size].val.via.array = {1, item};
  tuning->via.map = {size + 1, grown};
  gpu = kFuzzGpu;
  return pack(handle.get());
}

// The meta re-encoded for a new stored index of `raw_size` bytes inflated: its offsets, sizes
// and sha256 made consistent again (the meta's own size depends on the offsets it records, so
// it settles in a few passes).
Bytes reseal_meta(const Bytes& meta_bytes, const Bytes& index, uint64_t raw_size) {
  msgpack::object_handle handle = msgpack::unpack(reinterpret_cast<const char*>(meta_bytes.data()), meta_bytes.size());
  msgpack::object& meta = const_cast<msgpack::object&>(handle.get());
  attnpack::Sha256Digest digest = attnpack::sha256(index.data(), index.size());
  Bytes packed = meta_bytes;
  for (int pass = 0; pass < 4; ++pass) {
    const uint64_t index_offset = kPreamble + packed.size();
    for (uint32_t i = 0; i < meta.via.map.size; ++i) {
      msgpack::object_kv& kv = meta.via.map.ptr[i];
      std::string key(kv.key.via.str.ptr, kv.key.via.str.size);
      if (key == "index_offset") kv.val.via.u64 = index_offset;
      if (key == "index_size") kv.val.via.u64 = index.size();
      if (key == "index_raw_size") kv.val.via.u64 = raw_size;
      if (key == "images_offset") kv.val.via.u64 = index_offset + index.size();
      if (key == "index_sha256") {
        char* bin = static_cast<char*>(handle.zone()->allocate_align(32));
        std::memcpy(bin, digest.data(), 32);
        kv.val.via.bin.ptr = bin;
        kv.val.via.bin.size = 32;
      }
    }
    packed = pack(meta);
  }
  return packed;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  uint64_t below(uint64_t n) { return n ? std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_) : 0; }

  // Edits one node of the msgpack document in place (strings and grown arrays live in `zone`).
  void edit_document(msgpack::object& root, msgpack::zone& zone) {
    std::vector<msgpack::object*> nodes;
    collect(root, nodes);
    msgpack::object& node = *nodes[below(nodes.size())];
    switch (below(8) == 0 ? 255 : node.type) {
      case msgpack::type::POSITIVE_INTEGER: {
        static const uint64_t values[] = {0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 48, 63, 64, 127, 128, 255, 256,
                                          4095, 4096, 4097, 65535, 65536, 0x7fffffffull, 0x80000000ull,
                                          0xffffffffull, 0x100000000ull, 0x7fffffffffffffffull, ~0ull};
        const uint64_t pick = below(std::size(values) + 3);
        node.via.u64 = pick < std::size(values) ? values[pick]
                       : pick == std::size(values) ? node.via.u64 + 1
                       : pick == std::size(values) + 1 ? node.via.u64 - 1 : node.via.u64 * 2;
        if (node.via.u64 > 0x7fffffffffffffffull && below(2)) {
          node.type = msgpack::type::NEGATIVE_INTEGER;
          node.via.i64 = -1 - int64_t(below(1000));
        }
        break;
      }
      case msgpack::type::STR: {
        static const char* const words[] = {"", "q", "k", "lse", "do", "dq", "ptr", "i32", "i64", "f32",
                                            "tensormap", "q_desc", "q_stride_s", "q_stride_s_bytes", "D",
                                            "B", "Sk", "num_sms", "delta", "global_scratch", "cubin",
                                            "hsaco", "nvidia", "amd", "fwd", "bwd", "fp16", "bf16", "zero",
                                            "nan", "triton", "toy/fwd/fp16-d32-full/x", "const:0",
                                            "const:-1", "const:1.5", "const:1e40", "Hq_per_Hkv",
                                            "lse_stride_h_bytes", "q_stride_s_bytes*256", "Sq*0",
                                            "==", "<=", "in", "multiple_of", "Sk", "Hq"};
        if (node.via.str.size > 0 && below(3) == 0) {
          node.via.str.size = uint32_t(below(node.via.str.size));
        } else if (below(8) == 0) {
          const uint32_t size = uint32_t(1 + below(600));
          char* text = static_cast<char*>(zone.allocate_align(size));
          std::memset(text, 'a' + int(below(26)), size);
          node.via.str.ptr = text;
          node.via.str.size = size;
        } else {
          const char* word = words[below(std::size(words))];
          node.via.str.ptr = word;
          node.via.str.size = uint32_t(std::strlen(word));
        }
        break;
      }
      case msgpack::type::BIN:
        node.via.bin.size = uint32_t(below(node.via.bin.size + 1));
        break;
      case msgpack::type::BOOLEAN:
        if (below(2)) {
          node.via.boolean = !node.via.boolean;
        } else {
          node.type = msgpack::type::POSITIVE_INTEGER;
          node.via.u64 = below(3);
        }
        break;
      case msgpack::type::ARRAY:
        edit_sequence(node.via.array.ptr, node.via.array.size, zone);
        break;
      case msgpack::type::MAP:
        edit_sequence(node.via.map.ptr, node.via.map.size, zone);
        break;
      default:  // replace the node by nil, an integer or a string
        switch (below(3)) {
          case 0: node.type = msgpack::type::NIL; break;
          case 1: node.type = msgpack::type::POSITIVE_INTEGER; node.via.u64 = below(70000); break;
          default: node.type = msgpack::type::STR; node.via.str.ptr = "q"; node.via.str.size = 1; break;
        }
    }
  }

  void flip_bits(Bytes& data) {
    for (uint64_t n = 1 + below(8); n > 0; --n) data[below(data.size())] ^= uint8_t(1u << below(8));
  }

  void overwrite_run(Bytes& data) {
    const uint64_t start = below(data.size());
    const uint64_t length = std::min<uint64_t>(1 + below(64), data.size() - start);
    const int fill = int(below(4));
    for (uint64_t i = start; i < start + length; ++i) {
      data[i] = fill == 0 ? 0 : fill == 1 ? 0xff : uint8_t(below(256));
    }
  }

 private:
  void collect(msgpack::object& node, std::vector<msgpack::object*>& out) {
    out.push_back(&node);
    if (node.type == msgpack::type::ARRAY) {
      for (uint32_t i = 0; i < node.via.array.size; ++i) collect(node.via.array.ptr[i], out);
    } else if (node.type == msgpack::type::MAP) {
      for (uint32_t i = 0; i < node.via.map.size; ++i) {
        collect(node.via.map.ptr[i].key, out);
        collect(node.via.map.ptr[i].val, out);
      }
    }
  }

  // Shortens, grows (a copy of one element appended) or reorders an array or a map.
  template <typename Element>
  void edit_sequence(Element*& items, uint32_t& size, msgpack::zone& zone) {
    const uint64_t how = below(3);
    if (how == 0 && size > 0) {
      size = uint32_t(below(size));
    } else if (how == 1 && size > 0) {
      Element* grown = static_cast<Element*>(zone.allocate_align(sizeof(Element) * (size + 1)));
      std::memcpy(static_cast<void*>(grown), items, sizeof(Element) * size);
      grown[size] = items[below(size)];
      items = grown;
      size += 1;
    } else if (size > 1) {
      std::swap(items[below(size)], items[below(size)]);
    }
  }

  std::mt19937_64 rng_;
};

// Everything a caller could do with an opened bundle, on a grid of problems.
void exercise(attnpack_bundle* bundle) {
  for (int op : {ATTNPACK_OP_FWD, ATTNPACK_OP_BWD}) {
    for (int dtype : {ATTNPACK_DTYPE_FP16, ATTNPACK_DTYPE_BF16}) {
      for (int head_dim : {32, 64, 128}) {
        for (int causal : {0, 1}) {
          attnpack_problem p{};
          p.struct_size = sizeof(p);
          p.op = op;
          p.dtype = dtype;
          p.causal = causal;
          p.batch = 2;
          p.heads_q = 8;
          p.heads_kv = 2;
          p.seqlen_q = 300;
          p.seqlen_k = 1000;
          p.head_dim = head_dim;
          attnpack_tensor* tensors[] = {&p.q, &p.k, &p.v, &p.o, &p.dout, &p.dq, &p.dk, &p.dv};
          for (size_t t = 0; t < std::size(tensors); ++t) {
            const bool kv = t == 1 || t == 2 || t == 6 || t == 7;
            const int64_t s = kv ? p.seqlen_k : p.seqlen_q, h = kv ? p.heads_kv : p.heads_q;
            *tensors[t] = {reinterpret_cast<void*>(0x100000000ull * (t + 1)), h * s * head_dim, s * head_dim,
                           head_dim, 1};
          }
          p.lse = reinterpret_cast<void*>(0x900000000ull);
          attnpack_kernel_info info{};
          info.struct_size = sizeof(info);
          attnpack_select(bundle, &p, &info);
          char text[4096];
          size_t length = 0;
          attnpack_explain(bundle, &p, text, sizeof(text), &length);
          uint64_t workspace = 0;
          if (attnpack_workspace_size(bundle, &p, &workspace) != ATTNPACK_STATUS_OK) continue;
          attnpack_launch_params launch{};
          launch.struct_size = sizeof(launch);
          launch.workspace = reinterpret_cast<void*>(0xa00000000ull);
          launch.workspace_size = workspace;
          if (op == ATTNPACK_OP_FWD) {
            attnpack_forward(bundle, &p, &launch);
          } else {
            attnpack_backward(bundle, &p, &launch);
          }
        }
      }
    }
  }
  char text[1 << 16];
  size_t length = 0;
  attnpack_stats(bundle, text, sizeof(text), &length);
  attnpack_recorded_launches(bundle, text, sizeof(text), &length);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s ARCHIVE COUNT SEED [ACCEPTED_DIR]\n", argv[0]);
    return 2;
  }
  const std::string source = argv[1];
  const uint64_t count = std::stoull(argv[2]), seed = std::stoull(argv[3]);
  const std::string accepted_dir = argc > 4 ? argv[4] : "";
  const Bytes original = read_file(source);
  const Parts parts = split(original);
  // The archive's arch, from its own meta (mutants are opened as that arch).
  msgpack::object_handle meta = msgpack::unpack(reinterpret_cast<const char*>(parts.meta.data()), parts.meta.size());
  const msgpack::object* arch_node = map_value(meta.get(), "arch");
  const std::string arch(arch_node->via.str.ptr, arch_node->via.str.size);
  const std::string mutant_path = "attnpack-fuzz-" + std::to_string(::getpid()) + "-" + arch + ".apk";
  // Every bundle below is opened after this, so its recording driver reads the name.
  std::string gpu;
  const Bytes gpu_tuned_index = with_gpu_tuning(parts.index, gpu);
  if (!gpu.empty()) ::setenv("ATTNPACK_RECORDING_GPU_NAME", gpu.c_str(), 1);

  Mutator mutate(seed);
  std::map<std::string, uint64_t> outcomes;  // "<kind> <status>" -> count
  std::set<std::string> accepted;             // sha256 of distinct accepted mutants
  std::signal(SIGALRM, SIG_DFL);              // a hang ends the run
  for (uint64_t n = 0; n <= count; ++n) {
    Bytes mutant = original;
    std::string kind = "original";
    if (n > 0) {  // mutant 0 is the archive itself, which must open and verify
      const uint64_t pick = mutate.below(100);
      if (pick < 20) {
        kind = "raw";
        mutate.below(2) ? mutate.flip_bits(mutant) : mutate.overwrite_run(mutant);
      } else if (pick < 30) {
        kind = "truncated";
        mutant.resize(mutate.below(mutant.size()));
      } else if (pick < 38) {
        kind = "preamble";
        const uint64_t field = mutate.below(3);
        if (field == 0) put32(mutant.data() + 12, uint32_t(mutate.below(1u << 31)));        // meta size
        if (field == 1) put32(mutant.data() + 12, le32(mutant.data() + 12) + uint32_t(mutate.below(9)) - 4);
        if (field == 2) { mutant[8] = uint8_t(mutate.below(4)); mutant[10] = uint8_t(mutate.below(4)); }  // version
      } else if (pick < 55) {
        kind = "meta";
        msgpack::object_handle handle = msgpack::unpack(reinterpret_cast<const char*>(parts.meta.data()), parts.meta.size());
        mutate.edit_document(const_cast<msgpack::object&>(handle.get()), *handle.zone());
        mutant = assemble(original, pack(handle.get()), parts.stored_index, parts.images);
      } else {
        kind = "index";
        const Bytes& start = mutate.below(2) ? gpu_tuned_index : parts.index;
        msgpack::object_handle handle = msgpack::unpack(reinterpret_cast<const char*>(start.data()), start.size());
        for (uint64_t edits = 1 + mutate.below(2); edits > 0; --edits) {
          mutate.edit_document(const_cast<msgpack::object&>(handle.get()), *handle.zone());
        }
        const Bytes index = pack(handle.get()), stored = deflate(index);
        mutant = assemble(original, reseal_meta(parts.meta, stored, index.size()), stored, parts.images);
      }
    }
    write_file(mutant_path, mutant);

    ::alarm(10);
    attnpack_open_params params{};
    params.struct_size = sizeof(params);
    params.flags = ATTNPACK_OPEN_RECORDING_DRIVER;
    params.path = mutant_path.c_str();
    params.arch = arch.c_str();
    attnpack_bundle* bundle = nullptr;
    attnpack_status status = attnpack_open(&params, &bundle);
    std::string verdict;
    if (status != ATTNPACK_STATUS_OK) {
      if (std::strlen(attnpack_last_error()) == 0) {
        std::fprintf(stderr, "mutant %llu (%s): refused with %s and no message\n", (unsigned long long)n,
                     kind.c_str(), attnpack_status_name(status));
        return 1;
      }
      verdict = std::string("refused at open: ") + attnpack_status_name(status);
    } else {
      const attnpack_status images = attnpack_verify(bundle);
      if (images == ATTNPACK_STATUS_OK) {
        verdict = "accepted";
        attnpack::Sha256Digest digest = attnpack::sha256(mutant.data(), mutant.size());
        const std::string hex = attnpack::to_hex(digest.data(), digest.size());
        if (!accepted_dir.empty() && accepted.insert(hex).second) {
          write_file(accepted_dir + "/" + kind + "-" + std::to_string(n) + "-attnpack-" + arch + ".apk", mutant);
        }
      } else {
        verdict = std::string("refused at verify: ") + attnpack_status_name(images);
      }
      exercise(bundle);
      attnpack_close(bundle);
    }
    ::alarm(0);
    if (n == 0 && verdict != "accepted") {
      std::fprintf(stderr, "the unmutated archive %s was %s: %s\n", source.c_str(), verdict.c_str(),
                   attnpack_last_error());
      return 1;
    }
    ++outcomes[kind + ": " + verdict];
  }
  ::unlink(mutant_path.c_str());
  std::printf("%llu mutants of %s (seed %llu%s), none crashed, hung or read out of bounds:\n",
              (unsigned long long)count, source.c_str(), (unsigned long long)seed,
              gpu.empty() ? "" : (", on a device named '" + gpu + "'").c_str());
  for (const auto& [outcome, n] : outcomes) std::printf("  %6llu  %s\n", (unsigned long long)n, outcome.c_str());
  return 0;
}
