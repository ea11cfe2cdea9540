// Backend selection: auto picks by build and device, nccl where it cannot work is one clear UserError, and
// the factory builds a working CPU communicator for a single process.
#include "meshtrain/comm/communicator_factory.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "support/test_support.h"

using namespace meshtrain::comm;
using meshtrain::CommBackend;
using meshtrain::parse_enum;
using meshtrain::testing_support::user_error;

TEST(CommunicatorFactory, AutoIsCpuForCpuTensors) {
  EXPECT_EQ(resolve_backend(CommBackend::automatic, c10::Device(c10::kCPU)), CommBackend::cpu);
  EXPECT_EQ(resolve_backend(CommBackend::cpu, c10::Device(c10::kCUDA, 0)), CommBackend::cpu);
}

TEST(CommunicatorFactory, AutoIsNcclOnCudaWhenBuiltWithIt) {
  EXPECT_EQ(resolve_backend(CommBackend::automatic, c10::Device(c10::kCUDA, 0)), nccl_built() ? CommBackend::nccl : CommBackend::cpu);
}

TEST(CommunicatorFactory, UnknownBackendNamesTheValidOnes) {
  EXPECT_EQ(user_error([] { parse_enum<CommBackend>("mpi", "--backend"); }), "--backend: given 'mpi'; valid auto | nccl | cpu");
}

TEST(CommunicatorFactory, NcclWithCpuTensorsOrWithoutTheBuildIsAClearError) {
  const std::string msg = user_error([] { resolve_backend(CommBackend::nccl, c10::Device(c10::kCPU)); });
  if (nccl_built()) {
    EXPECT_EQ(msg, "parallel.backend: 'nccl' takes tensors on a CUDA device, but this run's device is cpu; use "
                   "train.device cuda, or parallel.backend cpu");
  } else {
    EXPECT_NE(msg.find("'nccl' needs a meshtrain built with CUDA and NCCL"), std::string::npos) << msg;
  }
}

TEST(CommunicatorFactory, NcclWithoutAVisibleGpuIsAClearError) {
  if (nccl_built() && at::hasCUDA() && at::getNumGPUs() > 0) GTEST_SKIP() << "a GPU is visible";
  const std::string msg = user_error([] { resolve_backend(CommBackend::nccl, c10::Device(c10::kCUDA, 0)); });
  EXPECT_TRUE(msg.find("'nccl' needs a CUDA device, and none is visible") != std::string::npos ||
              msg.find("'nccl' needs a meshtrain built with CUDA and NCCL") != std::string::npos)
      << msg;
}

TEST(CommunicatorFactory, BuildsASingleProcessCpuCommunicator) {
  CommSetup s;
  s.backend = CommBackend::automatic;
  auto c = make_communicator(WorldInfo{}, s);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->backend_name(), "cpu");
  EXPECT_EQ(c->size(), 1);
  at::Tensor x = at::arange(5, at::kFloat);
  c->all_reduce(x, ReduceOp::Sum)->wait();
  EXPECT_TRUE(at::equal(x, at::arange(5, at::kFloat)));
}

TEST(CommunicatorFactory, StagesForACallerOnAGpuWhenTheBackendTakesHostTensors) {
  CommSetup s;
  s.backend = CommBackend::cpu;
  auto plain = make_communicator(WorldInfo{}, s);
  EXPECT_FALSE(plain->takes(c10::Device(c10::kCUDA, 0)));
  s.device = c10::Device(c10::kCUDA, 0);  // only the setup names it: building the communicator needs no GPU
  auto staged = make_communicator(WorldInfo{}, s);
  EXPECT_TRUE(staged->takes(c10::Device(c10::kCUDA, 0)));
  EXPECT_TRUE(staged->device().is_cpu());
}

TEST(CommunicatorFactory, RanksShareGpusOnlyOverAHostBackend) {
  EXPECT_EQ(rank_cuda_device(CommBackend::cpu, 0, 1), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(rank_cuda_device(CommBackend::cpu, 3, 1), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(rank_cuda_device(CommBackend::cpu, 3, 2), c10::Device(c10::kCUDA, 1));
  EXPECT_EQ(rank_cuda_device(CommBackend::nccl, 1, 2), c10::Device(c10::kCUDA, 1));
  const std::string msg = user_error([] { rank_cuda_device(CommBackend::nccl, 1, 1); });
  EXPECT_NE(msg.find("parallel.backend: local rank 1 has no GPU of its own (1 visible)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NCCL needs one GPU per rank; parallel.backend: cpu lets ranks share GPUs"), std::string::npos)
      << msg;
  if (nccl_built()) {
    EXPECT_THROW(rank_cuda_device(CommBackend::automatic, 2, 2), meshtrain::UserError);
  } else {
    EXPECT_EQ(rank_cuda_device(CommBackend::automatic, 2, 2), c10::Device(c10::kCUDA, 0));
  }
}
