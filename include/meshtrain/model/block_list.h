// BlockList: the transformer's blocks, each registered under its global layer index. A pipeline stage holds
// a contiguous span of the layers (model/transformer.h ModelSpan), and its parameters keep the names of the
// whole model ("blocks.7.attn.wq.weight" on the stage that starts at layer 6), so initialisation, freezing
// globs, tensor-parallel cuts and checkpoints see the same names under every layout.
//
// Position i (0 ≤ i < size()) is the i-th block this module holds; global_index(i) its layer in the model.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <vector>

namespace meshtrain::model {

class BlockListImpl : public torch::nn::Module {
 public:
  BlockListImpl() = default;
  // Registers `block` as child "layer" (its global index); layers must be pushed in increasing order.
  void push_back(int64_t layer, std::shared_ptr<torch::nn::Module> block);

  size_t size() const { return blocks_.size(); }
  int64_t global_index(size_t i) const { return layers_.at(i); }
  std::shared_ptr<torch::nn::Module> ptr(size_t i) const { return blocks_.at(i); }
  template <typename T>
  std::shared_ptr<T> ptr(size_t i) const {
    return std::dynamic_pointer_cast<T>(blocks_.at(i));
  }
  std::shared_ptr<torch::nn::Module> operator[](size_t i) const { return ptr(i); }

 private:
  std::vector<std::shared_ptr<torch::nn::Module>> blocks_;
  std::vector<int64_t> layers_;
};
TORCH_MODULE(BlockList);

}  // namespace meshtrain::model
