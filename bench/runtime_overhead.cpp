// libattnpack's own costs on the GPU, apart from the kernels' run time (docs/runtime.md):
//   cold   the first attnpack_forward (or _backward) of one kernel in this fresh process:
//          inflate + sha256 + cuModuleLoadData of every step + the launches (the CUDA context
//          already exists, as under PyTorch); split into open, inflate+sha256 of step 0's image
//          alone, and the rest;
//   warm   host time per call against a bare launcher of the same kernels with the same
//          argument bytes; and the runtime's own work per call, measured with the recording
//          driver (which launches nothing).
// Run it a few times for several cold samples: each process is one.
//
// The bare launcher replays what the recording driver saw for one call: every launch of it
// (a backward is several steps, each its own function), with cuLaunchKernel, or
// cuLaunchKernelEx where a step has clusters. It is the least a hand-written launcher does:
// where a kernel takes TMA tensor maps (the gluon family), it encodes them once, up front, with
// cuTensorMapEncodeTiled from the recorded encode arguments and writes each descriptor over the
// recording driver's placeholder in the argument bytes. The runtime encodes its tensor maps on
// every call, so its extra time per call includes that encoding. Before timing, the bare replay
// is run once and must write the same output bytes as the runtime (deterministic kernels).
//
//   runtime_overhead [archive.apk] [--op fwd|bwd] [--kernel NAME] [--json]
//     archive  default: the device's archive in $ATTNPACK_BUNDLE_DIR
//     op       default fwd; the problem is B1 H8 S128 D128 bf16 causal either way, small so
//              that launch costs dominate
//     kernel   default: the one the archive selects for the problem
#include <attnpack/attnpack.h>
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "runtime_overhead: %s\n", message.c_str());
  std::exit(1);
}

void check(attnpack_status status, const char* what) {
  if (status != ATTNPACK_STATUS_OK) {
    std::fprintf(stderr, "runtime_overhead: %s: %s: %s\n", what, attnpack_status_name(status), attnpack_last_error());
    std::exit(1);
  }
}

void check_cu(CUresult result, const char* what) {
  if (result != CUDA_SUCCESS) {
    const char* text = nullptr;
    cuGetErrorString(result, &text);
    std::fprintf(stderr, "runtime_overhead: %s: %s\n", what, text ? text : "?");
    std::exit(1);
  }
}

// ---- the recording driver's JSON (runtime/src/drivers/recording_driver.cpp writes it) -------

// The pieces of `json` that each start with `opening` and run to the next one, or to `end`:
// the launches of {"launches":[...]}, or the tensor maps of one launch.
std::vector<std::string> split_objects(const std::string& json, const std::string& opening, size_t end) {
  std::vector<std::string> out;
  size_t at = json.find(opening);
  while (at < end) {
    const size_t next = json.find(opening, at + opening.size());
    out.push_back(json.substr(at, std::min(next, end) - at));
    at = next;
  }
  return out;
}

// Where `"key":` ends in `object`; fails naming the key when it is missing.
size_t field_value(const std::string& object, const char* key) {
  const std::string quoted = std::string("\"") + key + "\":";
  const size_t at = object.find(quoted);
  if (at == std::string::npos) {
    fail(std::string("recorded launch JSON has no \"") + key + "\": " + object.substr(0, 80));
  }
  return at + quoted.size();
}

uint64_t json_number(const std::string& object, const char* key) {
  return std::strtoull(object.c_str() + field_value(object, key), nullptr, 10);
}

std::vector<uint64_t> json_numbers(const std::string& object, const char* key) {
  const char* p = object.c_str() + field_value(object, key);
  if (*p++ != '[') fail(std::string("recorded launch JSON: \"") + key + "\" is not a list");
  std::vector<uint64_t> out;
  while (*p && *p != ']') {
    char* end = nullptr;
    out.push_back(std::strtoull(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

std::string json_text(const std::string& object, const char* key) {
  const size_t start = field_value(object, key) + 1;  // past the opening quote
  return object.substr(start, object.find('"', start) - start);
}

// cuTensorMapEncodeTiled's arguments as the runtime passed them (driver order and enums).
struct TensorMapArgs {
  uint32_t data_type = 0, rank = 0;
  uint64_t address = 0;
  std::vector<uint64_t> dims, strides;  // strides in bytes, of dims 1..rank-1
  std::vector<uint32_t> box, element_strides;
  uint32_t interleave = 0, swizzle = 0, l2_promotion = 0, oob_fill = 0;
};

struct RecordedLaunch {
  std::string symbol;
  std::vector<uint64_t> grid, block, cluster;  // grid in blocks, clusters included
  uint32_t shared = 0;
  std::vector<uint8_t> args;  // tensor-map slots hold placeholders (RecordingDriver::encode_tensormap)
  std::vector<uint64_t> arg_offsets;
  std::vector<TensorMapArgs> tensormaps;  // in the order the runtime encoded them: parameter order
};

std::vector<uint32_t> narrow(const std::vector<uint64_t>& values) {
  return std::vector<uint32_t>(values.begin(), values.end());
}

TensorMapArgs parse_tensormap(const std::string& object) {
  TensorMapArgs map;
  map.data_type = uint32_t(json_number(object, "data_type"));
  map.rank = uint32_t(json_number(object, "rank"));
  map.address = json_number(object, "address");
  map.dims = json_numbers(object, "dims");
  map.strides = json_numbers(object, "strides");
  map.box = narrow(json_numbers(object, "box"));
  map.element_strides = narrow(json_numbers(object, "element_strides"));
  map.interleave = uint32_t(json_number(object, "interleave"));
  map.swizzle = uint32_t(json_number(object, "swizzle"));
  map.l2_promotion = uint32_t(json_number(object, "l2_promotion"));
  map.oob_fill = uint32_t(json_number(object, "oob_fill"));
  if (map.rank < 1 || map.rank > 5 || map.dims.size() != map.rank || map.strides.size() != map.rank - 1 ||
      map.box.size() != map.rank || map.element_strides.size() != map.rank) {
    fail("recorded tensor map of rank " + std::to_string(map.rank) + " has lists of other lengths: " + object);
  }
  return map;
}

RecordedLaunch parse_launch(const std::string& object) {
  // "tensormaps" is a launch's last field: its own fields come before it.
  const size_t tensormaps = field_value(object, "tensormaps");
  const std::string own = object.substr(0, tensormaps);
  RecordedLaunch launch;
  launch.symbol = json_text(own, "symbol");
  launch.grid = json_numbers(own, "grid");
  launch.block = json_numbers(own, "block");
  launch.cluster = json_numbers(own, "cluster");
  launch.shared = uint32_t(json_number(own, "shared"));
  launch.arg_offsets = json_numbers(own, "arg_offsets");
  const std::string hex = json_text(own, "args");
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    launch.args.push_back(uint8_t(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  for (const std::string& map : split_objects(object, "{\"data_type\":", object.size())) {
    launch.tensormaps.push_back(parse_tensormap(map));
  }
  if (launch.grid.size() != 3 || launch.block.size() != 3 || launch.cluster.size() != 3) {
    fail("recorded launch of " + launch.symbol + " lacks a 3-d grid, block or cluster");
  }
  for (uint64_t offset : launch.arg_offsets) {
    if (offset >= launch.args.size()) fail("recorded launch of " + launch.symbol + " has an argument past its bytes");
  }
  return launch;
}

std::vector<RecordedLaunch> parse_recorded_launches(const std::string& json) {
  std::vector<RecordedLaunch> launches;
  for (const std::string& object : split_objects(json, "{\"symbol\":", json.find("],\"loaded\":"))) {
    launches.push_back(parse_launch(object));
  }
  return launches;
}

// ---- the bare launcher ---------------------------------------------------------------------

constexpr size_t kTensorMapBytes = sizeof(CUtensorMap);  // 128, passed by value
constexpr size_t kMaxArgBytes = 4096;                    // the runtime's kMaxKernargBytes

// One recorded launch made ready to replay: its function, and its argument bytes with real
// tensor maps in them. Filled in place (`params` points into `args`), so never copied.
struct BareLaunch {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  unsigned grid[3] = {}, block[3] = {}, cluster[3] = {}, shared = 0;
  alignas(64) uint8_t args[kMaxArgBytes] = {};  // as the runtime's own argument buffer
  std::vector<void*> params;                    // cuLaunchKernel's kernelParams

  BareLaunch() = default;
  BareLaunch(const BareLaunch&) = delete;
  BareLaunch& operator=(const BareLaunch&) = delete;
};

// The recording driver's stand-in for a descriptor: the tensor's address, then zeros.
std::vector<uint8_t> placeholder(uint64_t address) {
  std::vector<uint8_t> bytes(kTensorMapBytes, 0);
  std::memcpy(bytes.data(), &address, sizeof(address));
  return bytes;
}

// Whether the parameter at `offset` can be a tensor map: 128 bytes before the next parameter.
bool spans_a_tensormap(const RecordedLaunch& launch, uint64_t offset) {
  if (offset % 16 != 0 || offset + kTensorMapBytes > launch.args.size()) return false;
  return std::none_of(launch.arg_offsets.begin(), launch.arg_offsets.end(),
                      [&](uint64_t other) { return other > offset && other < offset + kTensorMapBytes; });
}

void encode_tensormap(const TensorMapArgs& map, const std::string& symbol, void* out) {
  alignas(64) CUtensorMap descriptor;  // cuTensorMapEncodeTiled writes 64-byte aligned memory
  const CUresult result = cuTensorMapEncodeTiled(
      &descriptor, CUtensorMapDataType(map.data_type), map.rank, reinterpret_cast<void*>(map.address),
      map.dims.data(), map.strides.data(), map.box.data(), map.element_strides.data(),
      CUtensorMapInterleave(map.interleave), CUtensorMapSwizzle(map.swizzle),
      CUtensorMapL2promotion(map.l2_promotion), CUtensorMapFloatOOBfill(map.oob_fill));
  check_cu(result, ("cuTensorMapEncodeTiled for " + symbol).c_str());
  std::memcpy(out, &descriptor, kTensorMapBytes);
}

// Writes each recorded tensor map's real descriptor over its placeholder. Slots and tensor maps
// are both in parameter order: walking the slots, one whose bytes are the placeholder of the
// next unmatched tensor map gets that map.
void write_tensormaps(const RecordedLaunch& launch, BareLaunch& bare) {
  size_t next = 0;
  for (uint64_t offset : launch.arg_offsets) {
    if (next == launch.tensormaps.size()) break;
    const std::vector<uint8_t> expected = placeholder(launch.tensormaps[next].address);
    if (!spans_a_tensormap(launch, offset) || std::memcmp(bare.args + offset, expected.data(), kTensorMapBytes) != 0) {
      continue;
    }
    encode_tensormap(launch.tensormaps[next], launch.symbol, bare.args + offset);
    ++next;
  }
  if (next != launch.tensormaps.size()) {
    char address[32];
    std::snprintf(address, sizeof(address), "0x%" PRIx64, launch.tensormaps[next].address);
    fail("launch of " + launch.symbol + ": tensor map " + std::to_string(next) + " of " +
         std::to_string(launch.tensormaps.size()) + " (address " + address +
         ") has no placeholder slot among its arguments; the recording driver's placeholder or "
         "argument order changed — update this bench");
  }
}

void prepare_bare_launch(const RecordedLaunch& launch, const std::vector<uint8_t>& image, BareLaunch& bare) {
  if (launch.args.size() > kMaxArgBytes) fail("launch of " + launch.symbol + " has more than 4096 argument bytes");
  check_cu(cuModuleLoadData(&bare.module, image.data()), ("cuModuleLoadData for " + launch.symbol).c_str());
  check_cu(cuModuleGetFunction(&bare.function, bare.module, launch.symbol.c_str()),
           ("cuModuleGetFunction(" + launch.symbol + ")").c_str());
  if (launch.shared > 48 * 1024) {
    check_cu(cuFuncSetAttribute(bare.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(launch.shared)),
             "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  }
  for (int d = 0; d < 3; ++d) {
    bare.grid[d] = unsigned(launch.grid[d]);
    bare.block[d] = unsigned(launch.block[d]);
    bare.cluster[d] = unsigned(launch.cluster[d]);
  }
  if (bare.cluster[0] * bare.cluster[1] * bare.cluster[2] > 8) {  // past the portable size, as the runtime
    check_cu(cuFuncSetAttribute(bare.function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
             "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)");
  }
  bare.shared = launch.shared;
  std::memcpy(bare.args, launch.args.data(), launch.args.size());
  write_tensormaps(launch, bare);
  for (uint64_t offset : launch.arg_offsets) bare.params.push_back(bare.args + offset);
}

CUresult launch_bare(const BareLaunch& bare, CUstream stream) {
  void** params = const_cast<void**>(bare.params.data());
  if (bare.cluster[0] * bare.cluster[1] * bare.cluster[2] == 1) {
    return cuLaunchKernel(bare.function, bare.grid[0], bare.grid[1], bare.grid[2], bare.block[0], bare.block[1],
                          bare.block[2], bare.shared, stream, params, nullptr);
  }
  // The attributes the runtime's CUDA driver launches clusters with.
  CUlaunchAttribute attributes[2] = {};
  attributes[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attributes[0].value.clusterDim.x = bare.cluster[0];
  attributes[0].value.clusterDim.y = bare.cluster[1];
  attributes[0].value.clusterDim.z = bare.cluster[2];
  attributes[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
  attributes[1].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
  CUlaunchConfig config = {};
  config.gridDimX = bare.grid[0];
  config.gridDimY = bare.grid[1];
  config.gridDimZ = bare.grid[2];
  config.blockDimX = bare.block[0];
  config.blockDimY = bare.block[1];
  config.blockDimZ = bare.block[2];
  config.sharedMemBytes = bare.shared;
  config.hStream = stream;
  config.attrs = attributes;
  config.numAttrs = 2;
  return cuLaunchKernelEx(&config, bare.function, params, nullptr);
}

// ---- timing and buffers --------------------------------------------------------------------

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

constexpr int kBatch = 200;   // calls between syncs: the launch queue never fills
constexpr int kBatches = 100;

// Median host microseconds per call of `call` over kBatches batches of kBatch calls.
template <typename Call>
double per_call_micros(Call call, CUstream stream) {
  std::vector<double> samples;
  for (int b = 0; b < kBatches + 5; ++b) {
    auto start = Clock::now();
    for (int i = 0; i < kBatch; ++i) call();
    double elapsed = micros_since(start);
    if (stream) check_cu(cuStreamSynchronize(stream), "cuStreamSynchronize");
    if (b >= 5) samples.push_back(elapsed / kBatch);  // the first batches warm caches
  }
  return median(samples);
}

struct DeviceBuffer {
  const char* name;
  CUdeviceptr address = 0;
  size_t bytes = 0;
};

DeviceBuffer allocate(const char* name, size_t bytes) {
  DeviceBuffer buffer{name, 0, bytes};
  check_cu(cuMemAlloc(&buffer.address, bytes), "cuMemAlloc");
  return buffer;
}

// Small pseudo-random values (bf16 or float32): the kernels compute on real numbers, and the
// runtime's outputs can be compared with the bare replay's.
void fill_random(const DeviceBuffer& buffer, bool bf16, uint32_t seed) {
  const size_t element_bytes = bf16 ? 2 : 4;
  std::vector<uint8_t> host(buffer.bytes);
  for (size_t i = 0; i < buffer.bytes / element_bytes; ++i) {
    seed = seed * 1664525u + 1013904223u;
    const float value = float(seed >> 8) / float(1u << 24) - 0.5f;  // [-0.5, 0.5)
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    if (bf16) bits >>= 16;  // truncated to bf16 (little-endian: the low bytes are copied)
    std::memcpy(host.data() + element_bytes * i, &bits, element_bytes);
  }
  check_cu(cuMemcpyHtoD(buffer.address, host.data(), host.size()), "cuMemcpyHtoD");
}

std::vector<uint8_t> read_back(const DeviceBuffer& buffer) {
  std::vector<uint8_t> host(buffer.bytes);
  check_cu(cuMemcpyDtoH(host.data(), buffer.address, host.size()), "cuMemcpyDtoH");
  return host;
}

// The outputs of one call after `call` ran on NaN-filled outputs.
template <typename Call>
std::vector<std::vector<uint8_t>> outputs_of(Call call, const std::vector<DeviceBuffer>& outputs, CUstream stream) {
  for (const DeviceBuffer& output : outputs) check_cu(cuMemsetD8(output.address, 0xff, output.bytes), "cuMemsetD8");
  call();
  check_cu(cuStreamSynchronize(stream), "cuStreamSynchronize");
  std::vector<std::vector<uint8_t>> out;
  for (const DeviceBuffer& output : outputs) out.push_back(read_back(output));
  return out;
}

[[noreturn]] void usage(const char* problem) {
  std::fprintf(stderr, "runtime_overhead: %s\n"
               "usage: runtime_overhead [archive.apk] [--op fwd|bwd] [--kernel NAME] [--json]\n", problem);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  const char* archive = nullptr;
  const char* forced_kernel = nullptr;
  bool as_json = false, backward = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      as_json = true;
    } else if (arg == "--kernel" && i + 1 < argc) {
      forced_kernel = argv[++i];
    } else if (arg == "--op" && i + 1 < argc) {
      const std::string op = argv[++i];
      if (op != "fwd" && op != "bwd") usage(("--op takes fwd or bwd, not " + op).c_str());
      backward = op == "bwd";
    } else if (arg.rfind("--", 0) == 0 || archive) {
      usage(("unexpected argument " + arg).c_str());
    } else {
      archive = argv[i];
    }
  }
  const char* op_name = backward ? "bwd" : "fwd";
  const char* call_name = backward ? "attnpack_backward" : "attnpack_forward";

  // The context first: PyTorch has one long before its first SDPA call.
  check_cu(cuInit(0), "cuInit");
  CUdevice device;
  CUcontext context;
  check_cu(cuDeviceGet(&device, 0), "cuDeviceGet");
  check_cu(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  check_cu(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  CUstream stream;
  check_cu(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  // A small problem: launch costs dominate its run time.
  const int B = 1, H = 8, S = 128, D = 128;
  const size_t bytes = size_t(B) * H * S * D * 2;
  const DeviceBuffer q = allocate("q", bytes), k = allocate("k", bytes), v = allocate("v", bytes);
  const DeviceBuffer o = allocate("o", bytes), lse = allocate("lse", size_t(B) * H * S * 4);
  const DeviceBuffer dout = allocate("dout", bytes), dq = allocate("dq", bytes), dk = allocate("dk", bytes),
                     dv = allocate("dv", bytes);
  uint32_t seed = 1;
  for (const DeviceBuffer& input : {q, k, v, o, dout}) fill_random(input, true, seed++);
  fill_random(lse, false, seed++);  // a backward's input; a forward overwrites it
  const std::vector<DeviceBuffer> outputs =
      backward ? std::vector<DeviceBuffer>{dq, dk, dv} : std::vector<DeviceBuffer>{o, lse};

  attnpack_problem problem{};
  problem.struct_size = sizeof(problem);
  problem.op = backward ? ATTNPACK_OP_BWD : ATTNPACK_OP_FWD;
  problem.dtype = ATTNPACK_DTYPE_BF16;
  problem.causal = 1;
  problem.batch = B;
  problem.heads_q = problem.heads_kv = H;
  problem.seqlen_q = problem.seqlen_k = S;
  problem.head_dim = D;
  auto view = [&](const DeviceBuffer& buffer) {
    return attnpack_tensor{reinterpret_cast<void*>(buffer.address), int64_t(H) * S * D, int64_t(S) * D, D, 1};
  };
  problem.q = view(q);
  problem.k = view(k);
  problem.v = view(v);
  problem.o = view(o);
  if (backward) {
    problem.dout = view(dout);
    problem.dq = view(dq);
    problem.dk = view(dk);
    problem.dv = view(dv);
  }
  problem.lse = reinterpret_cast<void*>(lse.address);
  problem.kernel = forced_kernel;

  // ---- cold: open, inflate + sha256 of step 0's image alone, then the first call
  attnpack_open_params open{};
  open.struct_size = sizeof(open);
  open.path = archive;
  attnpack_bundle* bundle = nullptr;
  auto start = Clock::now();
  check(attnpack_open(&open, &bundle), "attnpack_open");
  const double open_us = micros_since(start);
  attnpack_kernel_info kernel{};
  kernel.struct_size = sizeof(kernel);
  check(attnpack_select(bundle, &problem, &kernel), "attnpack_select");
  const std::string kernel_name = kernel.name;
  size_t image_size = 0;
  start = Clock::now();
  check(attnpack_kernel_image(bundle, kernel.name, 0, nullptr, 0, &image_size), "attnpack_kernel_image");
  const double inflate_us = micros_since(start);

  // The workspace (a backward's, or scratch); cuMemAlloc's 256-byte alignment is what it needs.
  uint64_t workspace_bytes = 0;
  check(attnpack_workspace_size(bundle, &problem, &workspace_bytes), "attnpack_workspace_size");
  CUdeviceptr workspace = 0;
  if (workspace_bytes > 0) check_cu(cuMemAlloc(&workspace, workspace_bytes), "cuMemAlloc (workspace)");
  attnpack_launch_params launch{};
  launch.struct_size = sizeof(launch);
  launch.stream = stream;
  launch.workspace = reinterpret_cast<void*>(workspace);
  launch.workspace_size = workspace_bytes;
  auto call = [&](attnpack_bundle* b) {
    return backward ? attnpack_backward(b, &problem, &launch) : attnpack_forward(b, &problem, &launch);
  };

  start = Clock::now();
  check(call(bundle), (std::string("first ") + call_name).c_str());
  const double first_call_us = micros_since(start);
  check_cu(cuStreamSynchronize(stream), "cuStreamSynchronize");

  // ---- warm: the runtime
  const double runtime_us = per_call_micros([&] { check(call(bundle), call_name); }, stream);

  // ---- the same call through the recording driver: the runtime's own work, and what it launched.
  // The recording bundle gets the same problem and launch params, so the argument bytes it
  // records hold the real device addresses: tensors, lse and the workspace with its scratch.
  // It pretends to have this device's SM count, so that grids and scratch sized by it agree.
  int num_sms = 0;
  check_cu(cuDeviceGetAttribute(&num_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device), "cuDeviceGetAttribute");
  setenv("ATTNPACK_RECORDING_NUM_SMS", std::to_string(num_sms).c_str(), 1);
  attnpack_bundle_info info{};
  info.struct_size = sizeof(info);
  check(attnpack_bundle_info_get(bundle, &info), "attnpack_bundle_info_get");
  open.path = info.path;
  open.flags = ATTNPACK_OPEN_RECORDING_DRIVER;
  attnpack_bundle* recording = nullptr;
  check(attnpack_open(&open, &recording), "attnpack_open (recording)");
  attnpack_kernel_info recorded_kernel{};
  recorded_kernel.struct_size = sizeof(recorded_kernel);
  check(attnpack_select(recording, &problem, &recorded_kernel), "attnpack_select (recording)");
  if (kernel_name != recorded_kernel.name) {
    fail("the recording bundle selects " + std::string(recorded_kernel.name) + " where the device's selects " +
         kernel_name + " — pass --kernel " + kernel_name);
  }
  check(call(recording), (std::string(call_name) + " (recording)").c_str());
  size_t length = 0;
  check(attnpack_recorded_launches(recording, nullptr, 0, &length), "attnpack_recorded_launches");
  std::string json(length + 1, '\0');
  check(attnpack_recorded_launches(recording, json.data(), json.size(), &length), "attnpack_recorded_launches");
  json.resize(length);
  const std::vector<RecordedLaunch> recorded = parse_recorded_launches(json);
  if (recorded.size() != kernel.num_steps) {
    fail("one " + std::string(call_name) + " of " + kernel_name + " recorded " + std::to_string(recorded.size()) +
         " launches; the kernel has " + std::to_string(kernel.num_steps) + " steps");
  }
  const double recording_us = per_call_micros([&] { check(call(recording), call_name); }, nullptr);

  // ---- the bare launcher: step i's image runs recorded launch i
  std::vector<BareLaunch> bare(recorded.size());
  size_t tensormaps_per_call = 0;
  for (uint32_t step = 0; step < recorded.size(); ++step) {
    size_t size = 0;
    check(attnpack_kernel_image(bundle, kernel_name.c_str(), step, nullptr, 0, &size), "attnpack_kernel_image");
    std::vector<uint8_t> image(size);
    check(attnpack_kernel_image(bundle, kernel_name.c_str(), step, image.data(), image.size(), &size),
          "attnpack_kernel_image");
    prepare_bare_launch(recorded[step], image, bare[step]);
    tensormaps_per_call += recorded[step].tensormaps.size();
  }
  auto bare_call = [&] {
    for (const BareLaunch& step : bare) check_cu(launch_bare(step, stream), "bare launch");
  };

  // The replay must do the runtime's work: the same output bytes from the same inputs.
  const bool outputs_checked = kernel.deterministic != 0;
  if (outputs_checked) {
    const auto expected = outputs_of([&] { check(call(bundle), call_name); }, outputs, stream);
    const auto replayed = outputs_of(bare_call, outputs, stream);
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (expected[i] != replayed[i]) {
        fail("the bare replay of " + kernel_name + " wrote another " + outputs[i].name + " than " + call_name +
             "; its launches or tensor maps differ from the runtime's");
      }
    }
  }

  const double bare_us = per_call_micros(bare_call, stream);

  char device_name[128] = {};
  cuDeviceGetName(device_name, sizeof(device_name) - 1, device);
  if (as_json) {
    std::printf("{\"device\": \"%s\", \"op\": \"%s\", \"kernel\": \"%s\", \"steps\": %zu, \"tensormaps\": %zu, "
                "\"outputs_checked\": %s, \"image_bytes\": %zu, \"open_us\": %.1f, \"inflate_sha256_us\": %.1f, "
                "\"first_call_us\": %.1f, \"runtime_launch_us\": %.3f, \"bare_launch_us\": %.3f, "
                "\"extra_us\": %.3f, \"runtime_work_us\": %.3f}\n",
                device_name, op_name, kernel_name.c_str(), bare.size(), tensormaps_per_call,
                outputs_checked ? "true" : "false", image_size, open_us, inflate_us, first_call_us, runtime_us,
                bare_us, runtime_us - bare_us, recording_us);
  } else {
    const char* plural = bare.size() == 1 ? "" : "es";
    std::printf("device        %s\nkernel        %s (%s; %zu launch%s per call; step 0 image %zu bytes)\n",
                device_name, kernel_name.c_str(), op_name, bare.size(), plural, image_size);
    std::printf("cold          open %.0f us, inflate+sha256 %.0f us, first %s %.0f us "
                "(inflate + sha256 + module loads + launches)\n", open_us, inflate_us, call_name, first_call_us);
    std::printf("warm          %s %.2f us/call, bare launcher %.2f us/call (%zu launch%s): %.2f us extra\n",
                call_name, runtime_us, bare_us, bare.size(), plural, runtime_us - bare_us);
    if (tensormaps_per_call > 0) {
      std::printf("              the extra includes encoding %zu tensor maps per call, which the bare "
                  "launcher encoded once up front\n", tensormaps_per_call);
    }
    std::printf("replay check  %s\n", outputs_checked ? "the bare launcher wrote the same outputs as the runtime"
                                                      : "skipped (the kernel is not deterministic)");
    std::printf("runtime work  %.2f us/call (recording driver: select, checks, packing; no launch)\n",
                recording_us);
  }
  attnpack_close(recording);
  attnpack_close(bundle);
  for (const BareLaunch& step : bare) cuModuleUnload(step.module);
  return 0;
}
