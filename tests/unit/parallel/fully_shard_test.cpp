// FullyShard without communication (fake communicators: rank r of W): shard sizes, the memory formula, and
// that each rank's shards are exactly its blocks of the single-process initial weights.
#include "meshtrain/parallel/fsdp/fully_shard.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>

#include "meshtrain/comm/fake_communicator.h"
#include "meshtrain/model/init.h"
#include "meshtrain/parallel/full_tensor.h"
#include "support/tiny_model.h"

using namespace meshtrain;
using parallel::FullyShard;

namespace {

ModelConfig tiny(const std::string& family) {
  return testing_support::tiny_model({.family = family, .vocab_size = 67, .n_head = 2,
                                      .n_kv_head = family == "llama" ? 1 : 2, .d_model = 24,
                                      .d_ff = family == "llama" ? 64 : 96});
}

std::unique_ptr<FullyShard> shard(model::Transformer& net, int rank, int world, int stage = 3) {
  parallel::FullyShardOptions o;
  o.zero_stage = stage;
  return std::make_unique<FullyShard>(*net, 7, at::Device(at::kCPU), comm::make_fake_communicator(rank, world),
                                      nullptr, o);
}

}  // namespace

TEST(FullyShard, ShardSizesFollowTheMemoryFormula) {
  for (const std::string family : {"gpt2", "llama"}) {
    model::Transformer full(tiny(family), at::TensorOptions().device(at::kMeta));
    const int64_t P = full->num_params();
    int64_t pad_bound = 0;  // padding per rank is below one row per parameter
    for (const auto& p : full->parameters()) pad_bound += p.numel() / p.size(0);
    for (int W : {1, 2, 4, 8}) {
      int64_t real = 0;
      for (int r = 0; r < W; ++r) {
        model::Transformer net(tiny(family), at::TensorOptions().device(at::kMeta));
        auto fs = shard(net, r, W);
        // Per-rank bytes for fp32 Adam training: master shard 4 + gradient shard 4 + two moments 8 = 16 per
        // element of the flat shard, which is params / W plus less than one row of padding per parameter.
        const int64_t S = fs->shard_numel();
        EXPECT_GE(S * W, P) << family << " W=" << W;
        EXPECT_LE(S, (P + W - 1) / W + pad_bound) << family << " W=" << W;
        EXPECT_LE(16 * S, 16 * (P / W + pad_bound + 1));
        std::map<std::string, at::Tensor> local;
        for (const auto& s : fs->sharded_parameters()) real += s.local.numel(), local[s.name] = s.local;
        // The module keeps full shapes but no storage: nothing of the whole model is allocated. A group of
        // one computes on the shards themselves (no second copy either).
        EXPECT_EQ(net->num_params(), P);
        for (const auto& item : net->named_parameters()) {
          if (W == 1) EXPECT_TRUE(item.value().is_alias_of(local.at(item.key()))) << item.key();
          else EXPECT_EQ(item.value().storage().nbytes(), 0u) << item.key();
        }
      }
      EXPECT_EQ(real, P) << "the ranks' blocks must cover every element exactly once";
    }
  }
}

TEST(FullyShard, ShardsAreBlocksOfTheSingleProcessInit) {
  const auto cfg = tiny("llama");
  model::Transformer ref(cfg, at::TensorOptions().device(at::kMeta));
  ref->materialize(at::Device(at::kCPU), 7);
  std::map<std::string, at::Tensor> want;
  for (const auto& item : ref->named_parameters()) want[item.key()] = item.value().detach();
  for (int r = 0; r < 3; ++r) {
    model::Transformer net(cfg, at::TensorOptions().device(at::kMeta));
    auto fs = shard(net, r, 3);
    for (const auto& s : fs->sharded_parameters()) {
      EXPECT_EQ(s.global_shape, want.at(s.name).sizes().vec());
      EXPECT_TRUE(at::equal(s.local, parallel::block_of(want.at(s.name), s))) << s.name << " rank " << r;
    }
  }
}

TEST(FullyShard, GatherAtWorldOneRestoresTheWholeModel) {
  const auto cfg = tiny("gpt2");
  model::Transformer ref(cfg, at::TensorOptions().device(at::kMeta));
  ref->materialize(at::Device(at::kCPU), 7);
  model::Transformer net(cfg, at::TensorOptions().device(at::kMeta));
  auto fs = shard(net, 0, 1);
  fs->gather_all();
  auto a = ref->named_parameters(), b = net->named_parameters();
  for (const auto& item : a) EXPECT_TRUE(at::equal(item.value(), b[item.key()])) << item.key();
  // And the forward matches.
  auto tokens = at::randint(67, {2, 8}, at::kLong);
  EXPECT_TRUE(at::allclose(ref->forward(tokens), net->forward(tokens)));
}

TEST(FullyShard, MaterialisedParametersAreShardedFromTheirValues) {
  const auto cfg = tiny("gpt2");
  model::Transformer net(cfg, at::TensorOptions().device(at::kMeta));
  net->materialize(at::Device(at::kCPU), 99);  // a different seed than FullyShard's: values must win
  std::map<std::string, at::Tensor> want;
  for (const auto& item : net->named_parameters()) want[item.key()] = item.value().detach().clone();
  auto fs = shard(net, 1, 2);
  for (const auto& s : fs->sharded_parameters())
    EXPECT_TRUE(at::equal(s.local, parallel::block_of(want.at(s.name), s))) << s.name;
}
