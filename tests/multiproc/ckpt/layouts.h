// Layouts for the checkpoint resharding tests (unit tests in one process and the meshrun workers): how a
// rank of each layout holds a block of every test tensor, the way the parallel layers would describe it.
// Header-only, test code.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <functional>
#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/sharded_tensor.h"

namespace meshtrain::ckpt_test {

struct Block {
  std::vector<int64_t> offsets, shape;
  bool write = true;
};

struct Layout {
  std::string name;
  int world = 1;
  std::function<Block(const std::vector<int64_t>& global, int rank)> block;
};

// FSDP's dim chunk: [r·ceil(n/W), min(n, (r+1)·ceil(n/W))), possibly empty.
inline std::pair<int64_t, int64_t> chunk(int64_t n, int W, int r) {
  const int64_t c = (n + W - 1) / W;
  const int64_t b = std::min(n, r * c);
  return {b, std::min(n, b + c) - b};
}

inline Block full(const std::vector<int64_t>& g, bool write) {
  return {std::vector<int64_t>(g.size(), 0), g, write};
}

// Split dim `d` of `g` in W chunks; a tensor with fewer dims falls back to dim 0, a scalar is replicated.
inline Block split_dim(const std::vector<int64_t>& g, int d, int W, int r, bool write = true) {
  if (g.empty()) return full(g, write && r == 0);
  Block b = full(g, write);
  const size_t dd = static_cast<size_t>(std::min<int>(d, static_cast<int>(g.size()) - 1));
  std::tie(b.offsets[dd], b.shape[dd]) = chunk(g[dd], W, r);
  return b;
}

inline std::vector<Layout> all_layouts() {
  return {
      {"single", 1, [](auto& g, int) { return full(g, true); }},
      {"ddp2", 2, [](auto& g, int r) { return full(g, r == 0); }},
      {"fsdp4", 4, [](auto& g, int r) { return split_dim(g, 0, 4, r); }},
      {"fsdp3", 3, [](auto& g, int r) { return split_dim(g, 0, 3, r); }},
      {"fsdp2", 2, [](auto& g, int r) { return split_dim(g, 0, 2, r); }},
      {"tp2", 2, [](auto& g, int r) { return split_dim(g, 1, 2, r); }},
      // FSDP 2 × TP 2: a dim-0 chunk of the TP column block (rank = fsdp·2 + tp).
      {"fsdp2xtp2", 4,
       [](auto& g, int r) {
         if (g.size() < 2) return split_dim(g, 0, 4, r);
         Block b = split_dim(g, 1, 2, r % 2);
         std::tie(b.offsets[0], b.shape[0]) = chunk(g[0], 2, r / 2);
         return b;
       }},
      // DDP 2 × TP 2: TP blocks replicated over two data-parallel ranks; dp rank 0 writes.
      {"ddp2xtp2", 4, [](auto& g, int r) { return split_dim(g, 1, 2, r % 2, r / 2 == 0); }},
  };
}

inline const Layout& layout_named(const std::string& name) {
  static const auto all = all_layouts();
  for (const auto& l : all)
    if (l.name == name) return l;
  throw UserError("unknown layout '" + name + "'");
}

// The test tensors (global, deterministic): odd sizes, an empty FSDP chunk ([2, 5] over 4), a scalar, an
// integer tensor, a bf16 one.
inline std::vector<std::pair<std::string, at::Tensor>> global_tensors() {
  auto g = at::make_generator<at::CPUGeneratorImpl>(1234);
  return {{"model.a", at::randn({10, 6}, g)},
          {"model.b", at::randn({7}, g)},
          {"model.c", at::randn({2, 5}, g)},
          {"optim.step", at::full({}, 42.0)},
          {"data.ids", at::randint(0, 1000, {5, 3}, g, at::TensorOptions().dtype(at::kLong))},
          {"model.h", at::randn({4, 4}, g).to(at::kBFloat16)}};
}

inline at::Tensor block_of(const at::Tensor& t, const Block& b) {
  at::Tensor v = t;
  for (size_t d = 0; d < b.shape.size(); ++d) v = v.narrow(static_cast<int64_t>(d), b.offsets[d], b.shape[d]);
  return v;
}

// What rank `r` of `l` holds: for saving, copies of its blocks; for loading (`zeros`), blank blocks.
inline std::vector<ShardedTensor> rank_view(const Layout& l, int r, bool zeros) {
  std::vector<ShardedTensor> out;
  for (auto& [name, t] : global_tensors()) {
    const Block b = l.block(t.sizes().vec(), r);
    at::Tensor local = zeros ? at::zeros(b.shape, t.options()) : block_of(t, b).clone();
    out.push_back({name, t.sizes().vec(), b.offsets, local, b.write});
  }
  return out;
}

// Empty if every block equals the global tensor's, else the first mismatch.
inline std::string check_rank_view(const std::vector<ShardedTensor>& got) {
  auto all = global_tensors();
  for (const auto& s : got) {
    for (auto& [name, t] : all) {
      if (name != s.name) continue;
      Block b{s.offsets, s.local.sizes().vec(), true};
      if (!at::equal(block_of(t, b), s.local)) return "tensor '" + name + "' differs";
    }
  }
  return "";
}

}  // namespace meshtrain::ckpt_test
