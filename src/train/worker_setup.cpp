#include "meshtrain/train/worker_setup.h"

#include <torch/cuda.h>

#include <chrono>
#include <cstdlib>

#include "meshtrain/comm/communicator_factory.h"
#include "meshtrain/comm/placement.h"
#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/hw/topology_detect.h"

namespace meshtrain::train {
namespace {

// Tensor-parallel groups exchange activations every layer: they belong inside an NVLink clique. The worker
// drives GPU local_rank (the launcher pinned its CPUs next to that GPU), so the mesh's placement
// (comm/placement.h) is a check here: a tp group that cannot sit inside a clique is a UserError unless
// parallel.allow_slow_tp, and a better assignment than the identity is logged with the launch order that
// realises it. Skipped where NVML indices need not be CUDA's (CUDA_VISIBLE_DEVICES set) or without GPUs.
void check_tp_placement(const MeshShape& shape, const comm::WorldInfo& world, bool allow_slow_tp) {
  if (shape.size(Dim::tp) == 1 || std::getenv("CUDA_VISIBLE_DEVICES") != nullptr) return;
  const hw::Topology topo = hw::detect_topology();
  if (topo.num_gpus() < world.local_world_size) return;
  const int node = world.rank / world.local_world_size;
  const comm::Placement p = comm::place_tp(topo, shape, world.local_world_size, node, allow_slow_tp);
  std::vector<int> identity(p.gpu_of_local_rank.size());
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<int>(i);
  if (p.gpu_of_local_rank == identity) {
    log::info("tp placement: local rank i drives GPU i; %s",
              p.groups_on_nvlink ? "tp groups on NVLink" : p.note.c_str());
    return;
  }
  std::string order;
  for (int g : p.gpu_of_local_rank) order += cat(order.empty() ? "" : ",", g);
  log::warn("tp placement: local rank i drives GPU i, but the tp groups sit better on NVLink as\n%s"
            "launch with CUDA_VISIBLE_DEVICES=%s to use it",
            p.describe(topo).c_str(), order.c_str());
}

void setup_device(const Config& cfg, WorkerSetup& w) {
  const bool has_cuda = torch::cuda::is_available();
  MT_USER_CHECK(cfg.train.device != TrainDevice::cuda || has_cuda,
                "train.device: given 'cuda' but no CUDA device is visible");
  w.cuda = cfg.train.device == TrainDevice::cuda || (cfg.train.device == TrainDevice::automatic && has_cuda);
  // Ranks may share a GPU only over a backend that takes host tensors (rank_cuda_device).
  w.device = w.cuda ? comm::rank_cuda_device(cfg.parallel.backend, w.world.local_rank,
                                             static_cast<int>(torch::cuda::device_count()))
                    : c10::Device(c10::kCPU);
  w.bf16 = compute_dtype(cfg.train, w.cuda) == Dtype::bf16;
}

}  // namespace

parallel::ParallelGroups WorkerSetup::groups() const {
  return mesh ? parallel::make_parallel_groups(*mesh) : parallel::ParallelGroups{};
}

WorkerSetup make_worker_setup(const Config& cfg, const comm::WorldInfo& world, const std::string& group) {
  WorkerSetup w;
  w.world = world;
  setup_device(cfg, w);
  if (world.world_size == 1) return w;
  // parallel.backend: nccl on the rank's GPU, or the CPU backend (the communicator then stages device tensors
  // through host memory itself).
  comm::CommSetup setup;
  setup.backend = cfg.parallel.backend;
  setup.device = w.device;
  setup.timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.parallel.timeout_s * 1000));
  setup.group = group;
  setup.flight_dir = cfg.train.out_dir;
  w.comm = comm::make_communicator(world, setup);
  w.mesh = std::make_unique<comm::Mesh>(cfg, w.comm);
  const DimSet data{Dim::dp, Dim::fsdp};
  w.data_rank = w.mesh->shape().index_in_group(world.rank, data);
  w.data_ranks = w.mesh->shape().size(data);
  if (w.cuda) check_tp_placement(w.mesh->shape(), world, cfg.parallel.allow_slow_tp);
  return w;
}

}  // namespace meshtrain::train
