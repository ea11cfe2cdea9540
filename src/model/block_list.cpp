#include "meshtrain/model/block_list.h"

#include <string>

#include "meshtrain/core/error.h"

namespace meshtrain::model {

void BlockListImpl::push_back(int64_t layer, std::shared_ptr<torch::nn::Module> block) {
  MT_CHECK(layers_.empty() || layer > layers_.back(), "BlockList: layer ", layer, " pushed after ",
           layers_.empty() ? -1 : layers_.back());
  blocks_.push_back(register_module(std::to_string(layer), std::move(block)));
  layers_.push_back(layer);
}

}  // namespace meshtrain::model
