#include "meshtrain/launch/worker_env.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include "meshtrain/launch/root_cause.h"

using namespace meshtrain::launch;

TEST(WorkerEnv, TorchrunContract) {
  WorkerIdentity w;
  w.local_rank = 3;
  w.local_world_size = 8;
  w.group_rank = 1;
  w.group_world_size = 2;
  w.master_port = 1234;
  w.restart_count = 2;
  w.max_restarts = 5;
  w.error_file = "/tmp/e.json";
  auto e = worker_env_overrides(w, {});
  EXPECT_EQ(e["RANK"], "11");
  EXPECT_EQ(e["WORLD_SIZE"], "16");
  EXPECT_EQ(e["LOCAL_RANK"], "3");
  EXPECT_EQ(e["GROUP_RANK"], "1");
  EXPECT_EQ(e["ROLE_RANK"], "11");
  EXPECT_EQ(e["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(e["TORCHELASTIC_USE_AGENT_STORE"], "True");
  EXPECT_EQ(e["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_EQ(e["OMP_NUM_THREADS"], "1");
  auto inherited = worker_env_overrides(w, {{"OMP_NUM_THREADS", "4"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}});
  EXPECT_EQ(inherited["OMP_NUM_THREADS"], "4");
  EXPECT_EQ(inherited["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "3");
  w.local_world_size = 1;
  EXPECT_EQ(worker_env_overrides(w, {}).count("OMP_NUM_THREADS"), 0u);
}

TEST(RootCause, ExitCodesAndText) {
  EXPECT_EQ(exit_code_of(7 << 8), 7);    // exited 7
  EXPECT_EQ(exit_code_of(SIGKILL), 137);  // killed by SIGKILL
  EXPECT_EQ(describe_status(SIGSEGV), "signal SIGSEGV (11)");
  WorkerFailure f;
  f.rank = 5;
  f.host = "node3";
  f.wait_status = 3 << 8;
  f.stderr_tail = {"Traceback", "ValueError: nan"};
  std::string s = format_root_cause(f, 2, 8);
  EXPECT_NE(s.find("FAILED after 2 attempts"), std::string::npos);
  EXPECT_NE(s.find("rank       : 5"), std::string::npos);
  EXPECT_NE(s.find("exit code 3"), std::string::npos);
  EXPECT_NE(s.find("ValueError: nan"), std::string::npos);
}

TEST(WorkerEnv, VirtualLocalRankNarrowsTheVisibleGpus) {
  WorkerIdentity w;
  w.local_rank = 1;
  w.local_world_size = 2;
  auto plain = worker_env_overrides(w, {{"CUDA_VISIBLE_DEVICES", "4,6"}});
  EXPECT_EQ(plain["LOCAL_RANK"], "1");
  EXPECT_EQ(plain.count("CUDA_VISIBLE_DEVICES"), 0u);  // inherited as is
  w.virtual_local_rank = true;
  auto v = worker_env_overrides(w, {{"CUDA_VISIBLE_DEVICES", "4,6"}});
  EXPECT_EQ(v["LOCAL_RANK"], "0");
  EXPECT_EQ(v["CUDA_VISIBLE_DEVICES"], "6");
  EXPECT_EQ(worker_env_overrides(w, {})["CUDA_VISIBLE_DEVICES"], "1");  // torchrun: str(local_rank)
  w.local_rank = 3;  // more workers than GPUs (CPU backend): round-robin
  EXPECT_EQ(worker_env_overrides(w, {{"CUDA_VISIBLE_DEVICES", "4,6"}})["CUDA_VISIBLE_DEVICES"], "6");
}

TEST(WorkerEnv, ConfigNcclEnvIsSetOverTheInheritedOne) {
  WorkerIdentity w;
  w.extra_env = {{"NCCL_IB_HCA", "mlx5_0,mlx5_1"}, {"NCCL_DEBUG", "WARN"}};
  const auto o = worker_env_overrides(w, {{"NCCL_DEBUG", "INFO"}, {"NCCL_SOCKET_IFNAME", "eth0"}});
  EXPECT_EQ(o.at("NCCL_IB_HCA"), "mlx5_0,mlx5_1");
  EXPECT_EQ(o.at("NCCL_DEBUG"), "WARN");
  EXPECT_EQ(o.count("NCCL_SOCKET_IFNAME"), 0u);  // not an override: inherited as it is
}
