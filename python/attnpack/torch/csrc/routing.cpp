// Making at::scaled_dot_product_attention reach the flash and efficient ops, for programs that
// enable attnpack from C++ (attnpack_torch_enable). The Python package does the same in
// attnpack/torch/_routing.py; both follow one rule:
//
// PyTorch >= 2.11 prefers cuDNN on sm_90/sm_100 when cuDNN > 9.15: on its first CUDA SDPA
// backend selection it installs the order cuDNN, flash, efficient, math once per process,
// overwriting any order set before. So the selection is run once first, then flash and efficient
// move just ahead of cuDNN, in the order they had; every other backend keeps its place and
// nothing is switched off.
#include "attnpack_torch.hpp"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <vector>

namespace attnpack_torch {
namespace {

constexpr int64_t kFlash = int64_t(at::SDPBackend::flash_attention);
constexpr int64_t kEfficient = int64_t(at::SDPBackend::efficient_attention);
constexpr int64_t kCudnn = int64_t(at::SDPBackend::cudnn_attention);

struct PriorityChange {
  std::vector<int64_t> before;
  std::vector<int64_t> after;
};

std::mutex g_routing_mutex;
std::optional<PriorityChange> g_change;  // what enable changed, guarded by g_routing_mutex

std::vector<int64_t> current_order() {
  std::vector<int64_t> order;
  for (at::SDPBackend backend : at::globalContext().sDPPriorityOrder()) order.push_back(int64_t(backend));
  return order;
}

// [3, 1, 2, 0, 4] -> [1, 2, 3, 0, 4]: flash and efficient, those behind cuDNN, just ahead of it.
std::vector<int64_t> flash_first(const std::vector<int64_t>& order) {
  auto cudnn = std::find(order.begin(), order.end(), kCudnn);
  if (cudnn == order.end()) return order;
  std::vector<int64_t> behind;
  for (auto it = cudnn + 1; it != order.end(); ++it) {
    if (*it == kFlash || *it == kEfficient) behind.push_back(*it);
  }
  std::vector<int64_t> result;
  for (int64_t backend : order) {
    if (backend == kCudnn) result.insert(result.end(), behind.begin(), behind.end());
    if (std::find(behind.begin(), behind.end(), backend) == behind.end()) result.push_back(backend);
  }
  return result;
}

}  // namespace

void route_sdpa_to_flash() {
  std::lock_guard<std::mutex> lock(g_routing_mutex);
  if (g_change || !at::hasCUDA()) return;  // done, or no CUDA selection will ever run
  // PyTorch's one-shot cuDNN-first initialization, now, so that it cannot undo what follows.
  const at::Tensor q = at::empty({1, 1, 1, 64}, at::TensorOptions().dtype(at::kHalf).device(at::kCUDA));
  (void)at::_fused_sdp_choice(q, q, q);
  const std::vector<int64_t> before = current_order();
  const std::vector<int64_t> after = flash_first(before);
  if (after == before) return;
  at::globalContext().setSDPPriorityOrder(after);
  g_change = PriorityChange{before, after};
}

void undo_routing() {
  std::lock_guard<std::mutex> lock(g_routing_mutex);
  if (!g_change) return;
  if (current_order() == g_change->after) {
    at::globalContext().setSDPPriorityOrder(g_change->before);
  } else {
    TORCH_WARN("attnpack: the SDPA priority order changed while attnpack was enabled; leaving it as it is");
  }
  g_change.reset();
}

}  // namespace attnpack_torch
