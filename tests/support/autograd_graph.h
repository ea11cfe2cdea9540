// What an autograd graph holds, for tests that check which path an op took (e.g. a fused function or flash
// attention rather than its fallback): the names of every node reachable from a tensor's grad_fn.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>

#include <deque>
#include <set>
#include <string>

namespace meshtrain::testing_support {

inline std::set<std::string> graph_names(const at::Tensor& y) {
  std::deque<torch::autograd::Node*> todo{y.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  std::set<std::string> names;
  while (!todo.empty()) {
    auto* n = todo.front();
    todo.pop_front();
    if (!n || !seen.insert(n).second) continue;
    names.insert(n->name());
    for (const auto& e : n->next_edges()) todo.push_back(e.function.get());
  }
  return names;
}

// Whether one of `names` contains `fn`.
inline bool graph_has(const std::set<std::string>& names, const std::string& fn) {
  for (const auto& n : names)
    if (n.find(fn) != std::string::npos) return true;
  return false;
}

inline bool graph_has(const at::Tensor& y, const std::string& fn) { return graph_has(graph_names(y), fn); }

}  // namespace meshtrain::testing_support
