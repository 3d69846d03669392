// A libtorch program without Python that puts attnpack's kernels behind
// at::scaled_dot_product_attention, runs it forward and backward on CUDA, and reports which
// bundle kernel served each pass (attnpack_torch_stats) and how close the results are.
//
//   attnpack_libtorch_consumer [BUNDLE_DIR]
//
// BUNDLE_DIR: the folder of attnpack-<version>-<arch>.apk; without it the runtime looks in
// $ATTNPACK_BUNDLE_DIR, then beside libattnpack.so (<prefix>/lib/attnpack after an install).
// Exit status: 0 served and correct; 1 a failure (printed); 77 no CUDA device, so nothing ran
// after enabling (the status CTest and the GPU tests read as "skipped").
#include <ATen/ATen.h>

#include <attnpack/attnpack.h>
#include <attnpack/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Case {
  const char* name;
  at::ScalarType dtype;
  int64_t batch, heads_q, heads_kv, seqlen, head_dim;
  bool causal;
};

// fp32 attention with K/V repeated per group, causal top-left (F.sdpa's meaning).
at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  const int64_t group = q.size(1) / k.size(1);
  const at::Tensor keys = k.repeat_interleave(group, 1), values = v.repeat_interleave(group, 1);
  at::Tensor scores = at::matmul(q, keys.transpose(-1, -2)) / std::sqrt(double(q.size(3)));
  if (causal) {
    const at::Tensor keep = at::ones({q.size(2), k.size(2)}, q.options().dtype(at::kBool)).tril();
    scores = scores.masked_fill(keep.logical_not(), -INFINITY);
  }
  return at::matmul(at::softmax(scores, -1), values);
}

// Output and the three gradients of one F.sdpa call (with whatever serves it right now).
std::vector<at::Tensor> forward_backward(const std::vector<at::Tensor>& inputs, const at::Tensor& grad_out,
                                         const Case& c, bool reference) {
  std::vector<at::Tensor> leaves;
  for (const at::Tensor& t : inputs) {
    leaves.push_back((reference ? t.to(at::kFloat) : t).detach().set_requires_grad(true));
  }
  const at::Tensor out =
      reference ? reference_attention(leaves[0], leaves[1], leaves[2], c.causal)
                : at::scaled_dot_product_attention(leaves[0], leaves[1], leaves[2], /*attn_mask=*/{},
                                                   /*dropout_p=*/0.0, c.causal, /*scale=*/std::nullopt,
                                                   /*enable_gqa=*/c.heads_q != c.heads_kv);
  out.backward(reference ? grad_out.to(at::kFloat) : grad_out);
  return {out.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
}

double max_error(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kFloat) - want).abs().max().item<double>();
}

std::string stats_json() {
  std::string text(1 << 14, '\0');
  const size_t length = attnpack_torch_stats(text.data(), text.size());
  if (length >= text.size()) {
    text.assign(length + 1, '\0');
    attnpack_torch_stats(text.data(), text.size());
  }
  text.resize(length);
  return text;
}

// The count after `"<op>": {"served": ` in the stats JSON (its format is fixed, see torch.h).
long served_count(const std::string& stats, const std::string& op) {
  const std::string key = "\"" + op + "\": {\"served\": ";
  const size_t at = stats.find(key);
  return at == std::string::npos ? -1 : std::strtol(stats.c_str() + at + key.size(), nullptr, 10);
}

int fail(const std::string& message) {
  std::fprintf(stderr, "attnpack_libtorch_consumer: %s\n", message.c_str());
  char error[1024];
  attnpack_torch_disable(error, sizeof(error));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* bundle_dir = argc > 1 ? argv[1] : nullptr;
  std::printf("attnpack runtime %s; libattnpack_torch built with torch %s\n", attnpack_version_string(),
              attnpack_torch_built_with());

  char error[2048];
  if (attnpack_torch_enable(bundle_dir, error, sizeof(error)) != 0) return fail(std::string("enable: ") + error);
  std::printf("enabled: attnpack serves the SDPA flash/efficient ops (bundle folder: %s)\n",
              bundle_dir ? bundle_dir : "the runtime's default");
  if (!at::hasCUDA()) {
    std::printf("no CUDA device: nothing to run\nstats: %s\n", stats_json().c_str());
    if (attnpack_torch_disable(error, sizeof(error)) != 0) return fail(std::string("disable: ") + error);
    return attnpack_torch_is_active() ? 1 : 77;
  }

  const Case cases[] = {
      {"bf16 B=2 Hq=8 Hkv=8 S=256 D=128 causal", at::kBFloat16, 2, 8, 8, 256, 128, true},
      {"fp16 B=1 Hq=8 Hkv=2 S=200 D=64 full, GQA", at::kHalf, 1, 8, 2, 200, 64, false},
  };
  bool all_good = true;
  for (const Case& c : cases) {
    at::manual_seed(0);
    const auto options = at::TensorOptions().dtype(c.dtype).device(at::kCUDA);
    const std::vector<at::Tensor> inputs = {
        at::randn({c.batch, c.heads_q, c.seqlen, c.head_dim}, options),
        at::randn({c.batch, c.heads_kv, c.seqlen, c.head_dim}, options),
        at::randn({c.batch, c.heads_kv, c.seqlen, c.head_dim}, options)};
    const at::Tensor grad_out = at::randn({c.batch, c.heads_q, c.seqlen, c.head_dim}, options);

    attnpack_torch_reset_stats();
    const std::vector<at::Tensor> mine = forward_backward(inputs, grad_out, c, false);
    const std::string stats = stats_json();  // counted when each op decided, before it ran

    // PyTorch's own answer (cuDNN or flash, as it chooses) and the fp32 reference.
    if (attnpack_torch_disable(error, sizeof(error)) != 0) return fail(std::string("disable: ") + error);
    const std::vector<at::Tensor> theirs = forward_backward(inputs, grad_out, c, false);
    if (attnpack_torch_enable(bundle_dir, error, sizeof(error)) != 0) return fail(std::string("enable: ") + error);
    const std::vector<at::Tensor> want = forward_backward(inputs, grad_out, c, true);

    std::printf("case %s\n  stats: %s\n", c.name, stats.c_str());
    const long fwd = served_count(stats, "flash_fwd"), bwd = served_count(stats, "flash_bwd");
    const bool served = fwd == 1 && bwd == 1 && stats.find("\"fallbacks\": {}") != std::string::npos;
    std::printf("  served by the bundle: forward %s, backward %s\n", fwd == 1 ? "yes" : "NO",
                bwd == 1 ? "yes" : "NO");
    bool close = true;
    // Within twice PyTorch's own error against fp32, or a few ulps of the dtype.
    const double ulp = c.dtype == at::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < 4; ++i) {
      const double err = max_error(mine[i], want[i]), err_torch = max_error(theirs[i], want[i]);
      const double bound = std::max(2 * err_torch, ulp * want[i].abs().max().item<double>() + 1e-5);
      close = close && err <= bound && std::isfinite(err);
      std::printf("  %-3s error %.3g (PyTorch %.3g, bound %.3g)%s\n", names[i], err, err_torch, bound,
                  err <= bound ? "" : "  <-- too large");
    }
    all_good = all_good && served && close;
  }
  if (attnpack_torch_disable(error, sizeof(error)) != 0) return fail(std::string("disable: ") + error);
  std::printf("%s\n", all_good ? "result: ok" : "result: FAILED");
  return all_good ? 0 : 1;
}
