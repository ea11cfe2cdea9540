// train.cuda_graph's refusals that the trainer asks of the layout and the device (one line naming the key,
// what was given and what is valid). The captured step itself runs in tests/e2e/cuda_graph_gpu_test.py.
#include "meshtrain/train/cuda_graph_step.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "meshtrain/core/config.h"
#include "meshtrain/parallel/parallelize.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

using namespace meshtrain;

namespace {

std::unique_ptr<parallel::ParallelModel> layout(bool wrapped) {
  Config c;
  c.source = "test.yaml";
  c.model = testing_support::tiny_model({.n_head = 2, .d_model = 16, .max_seq_len = 8});
  c.data.train = {"x"};
  c.parallel.force_wrapper = wrapped;  // DDP's reducer over a group of one: its hooks run in backward
  resolve(c, 1);
  return parallel::parallelize(model::Transformer(c.model, at::TensorOptions().device(at::kMeta)), {}, c,
                               at::Device(at::kCPU));
}

}  // namespace

TEST(CudaGraphStep, RefusesALayoutWithHooksInBackward) {
  auto pm = layout(/*wrapped=*/true);
  const std::string e = testing_support::user_error([&] { train::CudaGraphStep(*pm, at::Device(at::kCPU)); });
  EXPECT_EQ(e.rfind("train.cuda_graph: given on with the layout 'ddp over 1 rank(s)", 0), 0u) << e;
  EXPECT_NE(e.find("valid off, or on in a single process"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(CudaGraphStep, RefusesADeviceOtherThanCuda) {
  auto pm = layout(/*wrapped=*/false);
  ASSERT_TRUE(pm->capturable());
  const std::string e = testing_support::user_error([&] { train::CudaGraphStep(*pm, at::Device(at::kCPU)); });
  EXPECT_EQ(e, "train.cuda_graph: given on with the device cpu; valid off, or on with a CUDA device");
}
