// ServingRanks: one process stays as it was (no group, the flags' placement); a head count that does not split
// over the tensor-parallel ranks is one line naming the key and the arithmetic. The ranks themselves run as real
// processes under meshrun (e2e.serve.tp).
#include "meshtrain/serve/engine/serving_ranks.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "meshtrain/core/error.h"

namespace meshtrain::serve {
namespace {

ModelConfig shape(int64_t heads, int64_t kv_heads, int64_t d_ff, int64_t vocab) {
  ModelConfig m;
  m.n_head = heads;
  m.n_kv_head = kv_heads;
  m.d_model = 16 * heads;
  m.d_ff = d_ff;
  m.vocab_size = vocab;
  return m;
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ServingRanks, HeadsMustSplitOverTheRanks) {
  EXPECT_EQ(refusal([] { check_tensor_parallel_split(shape(32, 8, 512, 1000), 8); }), "(accepted)");
  EXPECT_EQ(refusal([] { check_tensor_parallel_split(shape(6, 6, 7, 10), 1); }), "(accepted)");
  const std::string heads = refusal([] { check_tensor_parallel_split(shape(4, 2, 128, 1000), 3); });
  EXPECT_NE(heads.find("model.n_head 4 is not divisible by 3 (4 % 3 = 1)"), std::string::npos) << heads;
  EXPECT_EQ(heads.find('\n'), std::string::npos) << heads;
  const std::string kv = refusal([] { check_tensor_parallel_split(shape(8, 2, 128, 1000), 4); });
  EXPECT_NE(kv.find("model.n_kv_head 2 is not divisible by 4"), std::string::npos) << kv;
  const std::string mlp = refusal([] { check_tensor_parallel_split(shape(4, 4, 130, 1000), 4); });
  EXPECT_NE(mlp.find("model.d_ff 130 is not divisible by 4"), std::string::npos) << mlp;
  const std::string vocab = refusal([] { check_tensor_parallel_split(shape(4, 4, 128, 2), 4); });
  EXPECT_NE(vocab.find("model.vocab_size 2"), std::string::npos) << vocab;
  ModelConfig mha = shape(6, 0, 12, 100);  // n_kv_head 0: as many as the query heads
  EXPECT_EQ(refusal([&] { check_tensor_parallel_split(mha, 3); }), "(accepted)");
}

TEST(ServingRanks, OneProcessHasNoGroup) {
  unsetenv("WORLD_SIZE");
  unsetenv("RANK");
  const auto placement = c10::TensorOptions().device(c10::kCPU).dtype(at::kFloat);
  const ServingRanks r = join_serving_ranks(placement, std::chrono::seconds(1));
  EXPECT_EQ(r.tp(), 1);
  EXPECT_TRUE(r.leader());
  EXPECT_EQ(r.group, nullptr);
  EXPECT_EQ(r.steps, nullptr);
  EXPECT_EQ(r.placement.device(), c10::Device(c10::kCPU));
  EXPECT_EQ(r.min_over_ranks(17), 17);
}

}  // namespace
}  // namespace meshtrain::serve
