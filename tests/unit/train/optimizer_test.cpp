// make_optimizer() over a layout: what setting up the optimizer leaves on (and briefly adds to) the device.
#include "meshtrain/train/optimizer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "meshtrain/comm/fake_communicator.h"
#include "meshtrain/core/config_enums.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/parallel/parallelize.h"
#include "support/cpu_allocation_count.h"
#include "support/tiny_model.h"

using namespace meshtrain;

// The streamed FSDP offload (configs/node8/llama3.1-70b-offload-fsdp8.yaml's layout, rank 0 of FSDP 2 here)
// keeps only the compute-dtype shards on the device, and setting it up must not pass through more: the fp32
// shards are drawn (4 B a parameter), the host master copies them, and each unit is cast to bf16 with the fp32
// shards let go as it goes. One H200 measured a 70B-shaped layer at 8 B a parameter while it was built (FSDP
// made fp32 gradient shards the streamed layout never uses), then 6 B (the optimizer held every fp32 shard
// through the casts). On the CPU the device is the CPU allocator, which also holds the host state (16 B a
// parameter), so the bound is on the peak above what stays: the fp32 shards over their casts (2 B a
// parameter) plus one unit's cast and one parameter's draw — well below the 4 B and 8 B of those two faults.
TEST(MakeOptimizer, StreamedFsdpOffloadSetsUpWithoutGradientShardsOrHeldFp32Shards) {
  Config c;
  c.source = "test.yaml";
  c.model = testing_support::tiny_model({.family = "llama", .vocab_size = 32, .n_layer = 8, .n_head = 2,
                                         .d_model = 16, .d_ff = 64, .max_seq_len = 8});
  c.data.train = {"x"};
  c.train.dtype = ComputeDtype::bf16;
  c.parallel.fsdp = 2;
  c.parallel.param_dtype = Dtype::bf16;
  c.optimizer.offload = OptimizerOffload::cpu;
  c.optimizer.offload_threads = 1;
  resolve(c, 2);
  validate(c, 2);
  parallel::ParallelGroups g;
  g.world = comm::make_fake_communicator(0, 2);
  g.fsdp = comm::make_fake_communicator(0, 2);
  g.dp = comm::make_fake_communicator(0, 1);
  testing_support::CpuAllocationCount count;
  auto pm = parallel::parallelize(model::Transformer(c.model, at::TensorOptions().device(at::kMeta)), g, c,
                                  at::Device(at::kCPU));
  auto opt = train::make_optimizer(*pm, c.optimizer, /*grad_accum=*/1);
  int64_t shard = 0;
  for (const auto& p : opt->params()) {
    EXPECT_EQ(p.param.scalar_type(), at::kBFloat16) << p.name << ": the device holds the compute dtype only";
    EXPECT_FALSE(p.param.grad().defined()) << p.name;
    shard += p.param.numel();
  }
  ASSERT_GT(shard, 0);
  const int64_t above = count.peak() - count.now();
  EXPECT_LE(above, 2 * shard + shard / 2) << "setting up peaked " << above << " B above what it keeps, for "
                                          << shard << " trainable shard parameters";
}
