/* The public header as a C11 program: it compiles as C, its calls link, and the failures a
 * C caller meets first come back as statuses with messages.
 * `attnpack_c_api_check layout` prints the struct layout as JSON instead, which
 * tests/cpu/test_runtime_binding.py compares with the ctypes mirror in attnpack/runtime.py. */
#include <attnpack/attnpack.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define FIELD(type, field) printf("%s\"%s\": [%zu, %zu]", first++ ? ", " : "", #field, \
                                  offsetof(type, field), sizeof(((type*)0)->field))
#define STRUCT(type, body)                                      \
  do {                                                          \
    int first = 0;                                              \
    printf("%s\"%s\": {\"size\": %zu, \"fields\": {", structs++ ? ", " : "", #type, sizeof(type)); \
    body;                                                       \
    printf("}}");                                               \
  } while (0)

static int print_layout(void) {
  int structs = 0;
  printf("{");
  STRUCT(attnpack_open_params, {
    FIELD(attnpack_open_params, struct_size); FIELD(attnpack_open_params, flags);
    FIELD(attnpack_open_params, path); FIELD(attnpack_open_params, directory);
    FIELD(attnpack_open_params, arch);
  });
  STRUCT(attnpack_bundle_info, {
    FIELD(attnpack_bundle_info, struct_size); FIELD(attnpack_bundle_info, format_major);
    FIELD(attnpack_bundle_info, format_minor); FIELD(attnpack_bundle_info, num_kernels);
    FIELD(attnpack_bundle_info, num_images); FIELD(attnpack_bundle_info, path);
    FIELD(attnpack_bundle_info, arch); FIELD(attnpack_bundle_info, bundle_version);
    FIELD(attnpack_bundle_info, compilers); FIELD(attnpack_bundle_info, driver);
    FIELD(attnpack_bundle_info, tuned_on); FIELD(attnpack_bundle_info, num_gpu_models);
    FIELD(attnpack_bundle_info, gpu_models); FIELD(attnpack_bundle_info, gpu_entries);
  });
  STRUCT(attnpack_tensor, {
    FIELD(attnpack_tensor, data); FIELD(attnpack_tensor, stride_b); FIELD(attnpack_tensor, stride_h);
    FIELD(attnpack_tensor, stride_s); FIELD(attnpack_tensor, stride_d);
  });
  STRUCT(attnpack_problem, {
    FIELD(attnpack_problem, struct_size); FIELD(attnpack_problem, op); FIELD(attnpack_problem, dtype);
    FIELD(attnpack_problem, causal); FIELD(attnpack_problem, batch); FIELD(attnpack_problem, heads_q);
    FIELD(attnpack_problem, heads_kv); FIELD(attnpack_problem, seqlen_q); FIELD(attnpack_problem, seqlen_k);
    FIELD(attnpack_problem, head_dim); FIELD(attnpack_problem, softmax_scale);
    FIELD(attnpack_problem, q); FIELD(attnpack_problem, k); FIELD(attnpack_problem, v);
    FIELD(attnpack_problem, o); FIELD(attnpack_problem, lse); FIELD(attnpack_problem, dout);
    FIELD(attnpack_problem, dq); FIELD(attnpack_problem, dk); FIELD(attnpack_problem, dv);
    FIELD(attnpack_problem, kernel); FIELD(attnpack_problem, flags);
  });
  STRUCT(attnpack_kernel_info, {
    FIELD(attnpack_kernel_info, struct_size); FIELD(attnpack_kernel_info, num_steps);
    FIELD(attnpack_kernel_info, name); FIELD(attnpack_kernel_info, family);
    FIELD(attnpack_kernel_info, deterministic); FIELD(attnpack_kernel_info, priority);
    FIELD(attnpack_kernel_info, backend); FIELD(attnpack_kernel_info, license);
    FIELD(attnpack_kernel_info, origin);
  });
  STRUCT(attnpack_launch_params, {
    FIELD(attnpack_launch_params, struct_size); FIELD(attnpack_launch_params, stream);
    FIELD(attnpack_launch_params, workspace); FIELD(attnpack_launch_params, workspace_size);
  });
  printf("}\n");
  return 0;
}

static int failures = 0;
static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s (last error: %s)\n", what, attnpack_last_error());
    ++failures;
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "layout") == 0) return print_layout();

  expect(attnpack_version() == ATTNPACK_VERSION_MAJOR * 10000 + ATTNPACK_VERSION_MINOR * 100 +
                                   ATTNPACK_VERSION_PATCH, "attnpack_version matches the header");
  expect(strcmp(attnpack_status_name(ATTNPACK_STATUS_UNSUPPORTED), "unsupported") == 0, "status name");

  attnpack_bundle* bundle = (attnpack_bundle*)1;
  expect(attnpack_open(NULL, &bundle) == ATTNPACK_STATUS_INVALID_ARGUMENT && bundle == NULL,
         "NULL params: invalid argument, no bundle");
  expect(strstr(attnpack_last_error(), "attnpack_open_params is NULL") != NULL, "the message names it");

  attnpack_open_params params;
  memset(&params, 0, sizeof(params));
  params.struct_size = sizeof(params) - 1;
  expect(attnpack_open(&params, &bundle) == ATTNPACK_STATUS_INVALID_ARGUMENT, "short struct_size");

  params.struct_size = sizeof(params);
  params.path = "/nonexistent/attnpack-0.1.0-sm_90.apk";
  params.arch = "sm_90";
  expect(attnpack_open(&params, &bundle) == ATTNPACK_STATUS_ARCHIVE_NOT_FOUND, "missing file");
  expect(strstr(attnpack_last_error(), "/nonexistent/attnpack-0.1.0-sm_90.apk") != NULL, "message names the file");

  attnpack_problem problem;
  memset(&problem, 0, sizeof(problem));
  problem.struct_size = sizeof(problem);
  expect(attnpack_forward(NULL, &problem, NULL) == ATTNPACK_STATUS_INVALID_ARGUMENT, "NULL bundle");
  attnpack_close(NULL);

  if (failures == 0) printf("c_api_check: ok\n");
  return failures != 0;
}
