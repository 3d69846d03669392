// libattnpack's own costs on the GPU, apart from the kernels' run time (docs/runtime.md):
//   cold   the first attnpack_forward of one kernel in this fresh process: inflate + sha256 +
//          cuModuleLoadData + launch (the CUDA context already exists, as under PyTorch);
//          split into open, inflate+sha256 alone, and the rest;
//   warm   host time per attnpack_forward against a bare cuLaunchKernel of the same function
//          with the same argument bytes; and the runtime's own work per call, measured with
//          the recording driver (which launches nothing).
// Run it a few times for several cold samples: each process is one.
//
//   runtime_overhead [archive.apk] [--json] [--kernel NAME]
//     archive  default: the device's archive in $ATTNPACK_BUNDLE_DIR
//     kernel   default: the one the archive selects for the problem. The bare launch replays
//              the recording driver's argument bytes, whose tensor-map slots are placeholders,
//              so a kernel with tensor maps (the gluon family) cannot be compared that way:
//              the bench refuses it and asks for a kernel without them.
#include <attnpack/attnpack.h>
#include <cuda.h>

#include <algorithm>
#include <chrono>
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

void check(attnpack_status status, const char* what) {
  if (status != ATTNPACK_STATUS_OK) {
    std::fprintf(stderr, "%s: %s: %s\n", what, attnpack_status_name(status), attnpack_last_error());
    std::exit(1);
  }
}

void check_cu(CUresult result, const char* what) {
  if (result != CUDA_SUCCESS) {
    const char* text = nullptr;
    cuGetErrorString(result, &text);
    std::fprintf(stderr, "%s: %s\n", what, text ? text : "?");
    std::exit(1);
  }
}

// The few fields of the recording driver's JSON the baseline needs.
std::vector<long long> json_numbers(const std::string& json, const std::string& key) {
  std::vector<long long> out;
  size_t at = json.find("\"" + key + "\":[");
  if (at == std::string::npos) return out;
  const char* p = json.c_str() + at + key.size() + 4;
  while (*p && *p != ']') {
    char* end = nullptr;
    out.push_back(std::strtoll(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

std::string json_text(const std::string& json, const std::string& key) {
  size_t at = json.find("\"" + key + "\":\"");
  if (at == std::string::npos) return "";
  size_t start = at + key.size() + 4;
  return json.substr(start, json.find('"', start) - start);
}

long long json_number(const std::string& json, const std::string& key) {
  size_t at = json.find("\"" + key + "\":");
  return at == std::string::npos ? 0 : std::atoll(json.c_str() + at + key.size() + 3);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

constexpr int kBatch = 200;   // launches between syncs: the launch queue never fills
constexpr int kBatches = 100;

// Median host microseconds per call of `launch` over kBatches batches of kBatch calls.
template <typename Launch>
double per_call_micros(Launch launch, CUstream stream) {
  std::vector<double> samples;
  for (int b = 0; b < kBatches + 5; ++b) {
    auto start = Clock::now();
    for (int i = 0; i < kBatch; ++i) launch();
    double elapsed = micros_since(start);
    if (stream) check_cu(cuStreamSynchronize(stream), "cuStreamSynchronize");
    if (b >= 5) samples.push_back(elapsed / kBatch);  // the first batches warm caches
  }
  return median(samples);
}

}  // namespace

int main(int argc, char** argv) {
  const char* archive = nullptr;
  const char* forced_kernel = nullptr;
  bool as_json = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) as_json = true;
    else if (std::strcmp(argv[i], "--kernel") == 0 && i + 1 < argc) forced_kernel = argv[++i];
    else archive = argv[i];
  }
  // The context first: PyTorch has one long before its first SDPA call.
  check_cu(cuInit(0), "cuInit");
  CUdevice device;
  CUcontext context;
  check_cu(cuDeviceGet(&device, 0), "cuDeviceGet");
  check_cu(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  check_cu(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  CUstream stream;
  check_cu(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  // A small forward: launch costs dominate its run time.
  const int B = 1, H = 8, S = 128, D = 128;
  CUdeviceptr q, k, v, o, lse;
  const size_t bytes = size_t(B) * H * S * D * 2;
  for (CUdeviceptr* p : {&q, &k, &v, &o}) check_cu(cuMemAlloc(p, bytes), "cuMemAlloc");
  check_cu(cuMemAlloc(&lse, size_t(B) * H * S * 4), "cuMemAlloc");
  check_cu(cuMemsetD8(q, 0, bytes), "cuMemsetD8");
  check_cu(cuMemsetD8(k, 0, bytes), "cuMemsetD8");
  check_cu(cuMemsetD8(v, 0, bytes), "cuMemsetD8");
  attnpack_problem problem{};
  problem.struct_size = sizeof(problem);
  problem.op = ATTNPACK_OP_FWD;
  problem.dtype = ATTNPACK_DTYPE_BF16;
  problem.causal = 1;
  problem.batch = B;
  problem.heads_q = problem.heads_kv = H;
  problem.seqlen_q = problem.seqlen_k = S;
  problem.head_dim = D;
  for (auto [tensor, address] : {std::pair{&problem.q, q}, {&problem.k, k}, {&problem.v, v}, {&problem.o, o}}) {
    *tensor = {reinterpret_cast<void*>(address), int64_t(H) * S * D, int64_t(S) * D, D, 1};
  }
  problem.lse = reinterpret_cast<void*>(lse);
  problem.kernel = forced_kernel;
  attnpack_launch_params launch{};
  launch.struct_size = sizeof(launch);
  launch.stream = stream;

  // ---- cold: open, inflate + sha256 alone, then the first call
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
  start = Clock::now();
  check(attnpack_forward(bundle, &problem, &launch), "first attnpack_forward");
  const double first_call_us = micros_since(start);
  check_cu(cuStreamSynchronize(stream), "cuStreamSynchronize");

  // ---- warm: the runtime against a bare cuLaunchKernel of the same function and bytes
  const double runtime_us = per_call_micros([&] { attnpack_forward(bundle, &problem, &launch); }, stream);

  attnpack_bundle_info info{};
  info.struct_size = sizeof(info);
  check(attnpack_bundle_info_get(bundle, &info), "attnpack_bundle_info_get");
  open.path = info.path;
  open.flags = ATTNPACK_OPEN_RECORDING_DRIVER;
  attnpack_bundle* recording = nullptr;
  check(attnpack_open(&open, &recording), "attnpack_open (recording)");
  check(attnpack_forward(recording, &problem, &launch), "attnpack_forward (recording)");
  std::string json(1 << 16, '\0');
  size_t length = 0;
  check(attnpack_recorded_launches(recording, json.data(), json.size(), &length), "recorded launches");
  json.resize(length);
  if (json.find("\"tensormaps\":[{") != std::string::npos) {
    std::fprintf(stderr, "kernel %s takes tensor maps; the bare cuLaunchKernel cannot replay them — "
                 "pass --kernel with a kernel that has none (a triton-family forward)\n", kernel_name.c_str());
    return 2;
  }
  const double recording_us = per_call_micros([&] { attnpack_forward(recording, &problem, &launch); }, nullptr);

  std::vector<unsigned char> image(image_size);
  check(attnpack_kernel_image(bundle, kernel_name.c_str(), 0, image.data(), image.size(), &image_size), "image");
  CUmodule module;
  CUfunction function;
  check_cu(cuModuleLoadData(&module, image.data()), "cuModuleLoadData");
  check_cu(cuModuleGetFunction(&function, module, json_text(json, "symbol").c_str()), "cuModuleGetFunction");
  const unsigned shared = unsigned(json_number(json, "shared"));
  if (shared > 48 * 1024) {
    check_cu(cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared)),
             "cuFuncSetAttribute");
  }
  std::vector<long long> grid = json_numbers(json, "grid"), block = json_numbers(json, "block");
  std::vector<long long> offsets = json_numbers(json, "arg_offsets");
  const std::string hex = json_text(json, "args");
  alignas(64) unsigned char args[4096];
  for (size_t i = 0; i < hex.size() / 2; ++i) args[i] = (unsigned char)std::stoi(hex.substr(2 * i, 2), nullptr, 16);
  std::vector<void*> params;
  for (long long offset : offsets) params.push_back(args + offset);
  const double bare_us = per_call_micros([&] {
    cuLaunchKernel(function, unsigned(grid[0]), unsigned(grid[1]), unsigned(grid[2]), unsigned(block[0]),
                   unsigned(block[1]), unsigned(block[2]), shared, stream, params.data(), nullptr);
  }, stream);

  char device_name[128] = {};
  cuDeviceGetName(device_name, sizeof(device_name) - 1, device);
  if (as_json) {
    std::printf("{\"device\": \"%s\", \"kernel\": \"%s\", \"image_bytes\": %zu, \"open_us\": %.1f, "
                "\"inflate_sha256_us\": %.1f, \"first_call_us\": %.1f, \"runtime_launch_us\": %.3f, "
                "\"bare_launch_us\": %.3f, \"extra_us\": %.3f, \"runtime_work_us\": %.3f}\n",
                device_name, kernel_name.c_str(), image_size, open_us, inflate_us, first_call_us,
                runtime_us, bare_us, runtime_us - bare_us, recording_us);
  } else {
    std::printf("device        %s\nkernel        %s (%zu-byte image)\n", device_name, kernel_name.c_str(), image_size);
    std::printf("cold          open %.0f us, inflate+sha256 %.0f us, first forward %.0f us "
                "(inflate + sha256 + module load + launch)\n", open_us, inflate_us, first_call_us);
    std::printf("warm          attnpack_forward %.2f us/call, bare cuLaunchKernel %.2f us/call: "
                "%.2f us extra\n", runtime_us, bare_us, runtime_us - bare_us);
    std::printf("runtime work  %.2f us/call (recording driver: select, checks, packing; no launch)\n",
                recording_us);
  }
  attnpack_close(recording);
  attnpack_close(bundle);
  cuModuleUnload(module);
  return 0;
}
