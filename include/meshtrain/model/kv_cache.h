// Key/value cache for incremental decoding: per layer, keys and values [B, H_kv, T_cached, hd].
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace meshtrain::model {

struct LayerKVCache {
  at::Tensor k, v;  // undefined until the first step
  int64_t length() const { return k.defined() ? k.size(2) : 0; }
};

struct KVCache {
  std::vector<LayerKVCache> layers;
  int64_t length() const { return layers.empty() ? 0 : layers[0].length(); }
};

}  // namespace meshtrain::model
