// The C API: argument checks, struct versions, and the one place where the library's
// exceptions become a status plus attnpack_last_error().
#include <cstddef>
#include <cstring>
#include <new>

#include "attnpack/attnpack.h"
#include "bundle.hpp"
#include "error.hpp"

struct attnpack_bundle {
  explicit attnpack_bundle(const attnpack::OpenOptions& options) : bundle(options) {}
  attnpack::Bundle bundle;
};

namespace attnpack {
namespace {

#define ATTNPACK_STRINGIFY(x) #x
#define ATTNPACK_VERSION_TEXT(a, b, c) ATTNPACK_STRINGIFY(a) "." ATTNPACK_STRINGIFY(b) "." ATTNPACK_STRINGIFY(c)

template <typename Body>
attnpack_status guarded(Body&& body) noexcept {
  try {
    body();
    return ATTNPACK_STATUS_OK;
  } catch (const Error& e) {
    set_last_error(e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return ATTNPACK_STATUS_INTERNAL;
  } catch (const std::exception& e) {
    set_last_error(std::string("internal error: ") + e.what());
    return ATTNPACK_STATUS_INTERNAL;
  } catch (...) {
    set_last_error("internal error: unknown exception");
    return ATTNPACK_STATUS_INTERNAL;
  }
}

Bundle& bundle_of(attnpack_bundle* handle) {
  if (!handle) fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "bundle is NULL");
  return handle->bundle;
}

template <typename Struct>
void require_struct(const Struct* value, const char* type, size_t minimum = sizeof(Struct)) {
  if (!value) fail(ATTNPACK_STATUS_INVALID_ARGUMENT, std::string(type) + " is NULL");
  if (value->struct_size < minimum) {
    fail(ATTNPACK_STATUS_INVALID_ARGUMENT,
         std::string(type) + ".struct_size is " + std::to_string(value->struct_size) +
             "; version 1 of the struct has " + std::to_string(minimum) + " bytes — set struct_size = sizeof(" +
             type + ")");
  }
}

void write_text(const std::string& text, char* buffer, size_t capacity, size_t* length) {
  if (length) *length = text.size();
  if (!buffer || capacity == 0) return;
  size_t n = std::min(capacity - 1, text.size());
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
}

LaunchOptions launch_options(const attnpack_launch_params* launch) {
  LaunchOptions options;
  if (!launch) return options;  // default stream, no workspace
  require_struct(launch, "attnpack_launch_params");
  options.stream = launch->stream;
  options.workspace = reinterpret_cast<uint64_t>(launch->workspace);
  options.workspace_size = launch->workspace_size;
  return options;
}

void run(attnpack_bundle* handle, const attnpack_problem* c_problem, const attnpack_launch_params* launch,
         Op op, const char* entry) {
  Bundle& bundle = bundle_of(handle);
  Problem problem = problem_from_c(c_problem);
  if (problem.op != op) {
    fail(ATTNPACK_STATUS_INVALID_ARGUMENT, std::string(entry) + " needs problem->op = " +
                                               (op == Op::Forward ? "ATTNPACK_OP_FWD" : "ATTNPACK_OP_BWD"));
  }
  bundle.run(problem, launch_options(launch));
}

}  // namespace
}  // namespace attnpack

using namespace attnpack;

extern "C" {

uint32_t attnpack_version(void) {
  return ATTNPACK_VERSION_MAJOR * 10000 + ATTNPACK_VERSION_MINOR * 100 + ATTNPACK_VERSION_PATCH;
}

const char* attnpack_version_string(void) {
  return ATTNPACK_VERSION_TEXT(ATTNPACK_VERSION_MAJOR, ATTNPACK_VERSION_MINOR, ATTNPACK_VERSION_PATCH);
}

const char* attnpack_status_name(attnpack_status status) {
  switch (status) {
    case ATTNPACK_STATUS_OK: return "ok";
    case ATTNPACK_STATUS_UNSUPPORTED: return "unsupported";
    case ATTNPACK_STATUS_INVALID_ARGUMENT: return "invalid_argument";
    case ATTNPACK_STATUS_ARCHIVE_NOT_FOUND: return "archive_not_found";
    case ATTNPACK_STATUS_ARCHIVE_CORRUPT: return "archive_corrupt";
    case ATTNPACK_STATUS_ARCHIVE_VERSION: return "archive_version";
    case ATTNPACK_STATUS_ARCH_MISMATCH: return "arch_mismatch";
    case ATTNPACK_STATUS_BAD_LAUNCH_SPEC: return "bad_launch_spec";
    case ATTNPACK_STATUS_NO_DRIVER: return "no_driver";
    case ATTNPACK_STATUS_NO_DEVICE: return "no_device";
    case ATTNPACK_STATUS_DRIVER_ERROR: return "driver_error";
    case ATTNPACK_STATUS_INTERNAL: return "internal";
  }
  return "unknown_status";
}

const char* attnpack_last_error(void) { return attnpack::last_error(); }

attnpack_status attnpack_open(const attnpack_open_params* params, attnpack_bundle** bundle) {
  return guarded([&] {
    if (!bundle) fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "bundle (the output) is NULL");
    *bundle = nullptr;
    require_struct(params, "attnpack_open_params");
    OpenOptions options;
    options.path = params->path ? params->path : "";
    options.directory = params->directory ? params->directory : "";
    options.arch = params->arch ? params->arch : "";
    options.recording = (params->flags & ATTNPACK_OPEN_RECORDING_DRIVER) != 0;
    if (params->flags & ~uint32_t(ATTNPACK_OPEN_RECORDING_DRIVER)) {
      fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "unknown attnpack_open_params.flags " + std::to_string(params->flags));
    }
    *bundle = new attnpack_bundle(options);
  });
}

void attnpack_close(attnpack_bundle* bundle) {
  guarded([&] { delete bundle; });
}

attnpack_status attnpack_bundle_info_get(const attnpack_bundle* handle, attnpack_bundle_info* info) {
  return guarded([&] {
    if (!handle) fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "bundle is NULL");
    require_struct(info, "attnpack_bundle_info", offsetof(attnpack_bundle_info, tuned_on));
    const Bundle& bundle = handle->bundle;
    const Archive& archive = bundle.archive();
    info->format_major = archive.format_major();
    info->format_minor = archive.format_minor();
    info->num_kernels = uint32_t(archive.kernels().size());
    info->num_images = uint32_t(archive.images().size());
    info->path = archive.path().c_str();
    info->arch = archive.arch().c_str();
    info->bundle_version = archive.bundle_version().c_str();
    info->compilers = bundle.compilers_text().c_str();
    info->driver = bundle.driver_name();
    if (info->struct_size >= offsetof(attnpack_bundle_info, num_gpu_models)) {  // version 2
      const auto& provenance = archive.tuning().provenance;
      auto gpu = provenance.find("gpu");
      bool measured = gpu != provenance.end() && provenance.count("status") &&
                      provenance.at("status") != "untuned";
      info->tuned_on = measured ? gpu->second.c_str() : "";
    }
    if (info->struct_size >= sizeof(attnpack_bundle_info)) {  // version 3
      const Bundle::GpuModels& models = bundle.gpu_models();
      info->num_gpu_models = uint32_t(models.names.size());
      info->gpu_models = models.names.empty() ? nullptr : models.names.data();
      info->gpu_entries = models.entries.empty() ? nullptr : models.entries.data();
    }
  });
}

attnpack_status attnpack_verify_images(attnpack_bundle* bundle) {
  return guarded([&] { bundle_of(bundle).verify_images(); });
}

attnpack_status attnpack_verify(attnpack_bundle* bundle) {
  return guarded([&] {
    Bundle& b = bundle_of(bundle);
    b.verify_launch_specs();
    b.verify_images();
  });
}

attnpack_status attnpack_kernel_image(attnpack_bundle* bundle, const char* kernel, uint32_t step,
                                      void* buffer, size_t capacity, size_t* size) {
  return guarded([&] {
    if (!kernel) fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "kernel name is NULL");
    std::vector<uint8_t> image = bundle_of(bundle).kernel_image(kernel, step);
    if (size) *size = image.size();
    if (buffer) std::memcpy(buffer, image.data(), std::min(capacity, image.size()));
  });
}

attnpack_status attnpack_select(attnpack_bundle* bundle, const attnpack_problem* problem,
                                attnpack_kernel_info* kernel) {
  return guarded([&] {
    Bundle& b = bundle_of(bundle);
    if (kernel) require_struct(kernel, "attnpack_kernel_info", offsetof(attnpack_kernel_info, deterministic));
    Selection selection = b.select(problem_from_c(problem));
    if (!selection.plan) fail(ATTNPACK_STATUS_UNSUPPORTED, selection.unsupported_reason);
    if (kernel) {
      const KernelRecord& record = *selection.plan->record;
      kernel->num_steps = uint32_t(selection.plan->steps.size());
      kernel->name = record.name.c_str();
      kernel->family = record.family.c_str();
      if (kernel->struct_size >= sizeof(attnpack_kernel_info)) {  // version 2
        const FamilyRecord& family = b.archive().families()[record.family_index];
        kernel->deterministic = record.deterministic ? 1 : 0;
        kernel->priority = family.priority;
        kernel->backend = family.backend.c_str();
        kernel->license = family.license.c_str();
        kernel->origin = family.origin.c_str();
      }
    }
  });
}

attnpack_status attnpack_explain(attnpack_bundle* bundle, const attnpack_problem* problem, char* buffer,
                                 size_t capacity, size_t* length) {
  return guarded([&] { write_text(bundle_of(bundle).explain(problem_from_c(problem)), buffer, capacity, length); });
}

attnpack_status attnpack_workspace_size(attnpack_bundle* bundle, const attnpack_problem* problem,
                                        uint64_t* bytes) {
  return guarded([&] {
    if (!bytes) fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "bytes (the output) is NULL");
    *bytes = 0;
    *bytes = bundle_of(bundle).workspace_size(problem_from_c(problem));
  });
}

attnpack_status attnpack_preload(attnpack_bundle* bundle, const attnpack_problem* problems, size_t count) {
  return guarded([&] {
    Bundle& b = bundle_of(bundle);
    if (count > 0 && !problems) fail(ATTNPACK_STATUS_INVALID_ARGUMENT, "problems is NULL");
    std::vector<Problem> converted;
    // Elements lie struct_size bytes apart: a newer caller's struct may be larger than ours.
    const size_t stride = count > 0 ? problem_from_c(problems), problems->struct_size : 0;
    for (size_t i = 0; i < count; ++i) {
      const char* element = reinterpret_cast<const char*>(problems) + i * stride;
      converted.push_back(problem_from_c(reinterpret_cast<const attnpack_problem*>(element)));
    }
    b.preload(converted);
  });
}

attnpack_status attnpack_forward(attnpack_bundle* bundle, const attnpack_problem* problem,
                                 const attnpack_launch_params* launch) {
  return guarded([&] { attnpack::run(bundle, problem, launch, Op::Forward, "attnpack_forward"); });
}

attnpack_status attnpack_backward(attnpack_bundle* bundle, const attnpack_problem* problem,
                                  const attnpack_launch_params* launch) {
  return guarded([&] { attnpack::run(bundle, problem, launch, Op::Backward, "attnpack_backward"); });
}

attnpack_status attnpack_stats(attnpack_bundle* bundle, char* buffer, size_t capacity, size_t* length) {
  return guarded([&] { write_text(bundle_of(bundle).stats_json(), buffer, capacity, length); });
}

attnpack_status attnpack_stats_reset(attnpack_bundle* bundle) {
  return guarded([&] { bundle_of(bundle).reset_stats(); });
}

attnpack_status attnpack_recorded_launches(attnpack_bundle* bundle, char* buffer, size_t capacity,
                                           size_t* length) {
  return guarded([&] {
    Bundle& b = bundle_of(bundle);
    std::string text = b.recorded_launches();
    write_text(text, buffer, capacity, length);
    if (buffer && capacity > text.size()) b.clear_recorded_launches();  // read in full: forget
  });
}

attnpack_status attnpack_recording_set_device(attnpack_bundle* bundle, int32_t device) {
  return guarded([&] { bundle_of(bundle).set_recording_device(device); });
}

}  // extern "C"
