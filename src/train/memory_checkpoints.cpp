#include "meshtrain/train/memory_checkpoints.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/launch/worker_env.h"
#include "meshtrain/plan/memory_model.h"

namespace meshtrain::train {
namespace {

constexpr double kBudget = 0.03;  // auto: the share of the run's time snapshots may take
constexpr int64_t kProbeAfter = 3;  // auto: steps after the start before the measured snapshot (warm-up is over)

double free_bytes(const std::string& dir) {
  struct statvfs vfs{};
  if (::statvfs(dir.c_str(), &vfs) != 0) return 0;
  return static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize);
}

}  // namespace

std::unique_ptr<MemoryCheckpoints> MemoryCheckpoints::make(const Config& cfg, const WorkerSetup& w,
                                                           const std::string& layout, int64_t state_bytes,
                                                           MaxOverRanks max_over_ranks) {
  const int64_t every = cfg.checkpoint.memory_every;
  if (every == 0) return nullptr;
  const char* root = std::getenv(launch::kHostCheckpointDirEnv);
  if (!root || !*root) {
    // Auto is quietly off outside meshrun (a single `meshtrain train` has no restart to serve).
    if (every > 0)
      log::warn("checkpoint.memory_every %lld: off, since no launcher gave this process a memory directory that "
                "outlives it (%s): start the run with meshrun", static_cast<long long>(every),
                launch::kHostCheckpointDirEnv);
    return nullptr;
  }
  // A restart reads them only under checkpoint.resume auto; with none or a path they would cost time for nothing.
  if (cfg.checkpoint.resume != "auto") {
    if (every > 0)
      log::warn("checkpoint.memory_every %lld: off, since a restart resumes from them only under "
                "checkpoint.resume auto (this run has '%s')", static_cast<long long>(every),
                cfg.checkpoint.resume.c_str());
    return nullptr;
  }
  // The node's ranks together, on the worst rank's figures (plan/memory_model.h counts the same copies).
  const int64_t nodes = w.world.world_size / w.world.local_world_size;
  const double copies = static_cast<double>(plan::snapshot_copies(nodes));
  const double need = max_over_ranks(copies * static_cast<double>(state_bytes) * w.world.local_world_size);
  const double have = -max_over_ranks(-free_bytes(root));
  if (need > have / 2) {
    const std::string why = log::sprintf("the node's %d rank(s) need %.2f GB of host memory for them (%.0f× the "
                                         "%.2f GB state of a rank), more than half the %.2f GB free in %s",
                                         w.world.local_world_size, need / 1e9, copies,
                                         static_cast<double>(state_bytes) / 1e9, have / 1e9, root);
    MT_USER_CHECK(every < 0, "checkpoint.memory_every ", every, ": ", why, "; lower it to 0 (off), or give the node "
                  "more memory there (/dev/shm's size, or MESHRUN_HOST_MEMORY_DIR for meshrun)");
    log::progress("in-memory checkpoints off: %s", why.c_str());
    return nullptr;
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.parallel.timeout_s * 1000));
  auto host = ckpt::HostCheckpoints::open(root, w.world, layout, timeout);
  return std::unique_ptr<MemoryCheckpoints>(
      new MemoryCheckpoints(std::move(host), std::max<int64_t>(every, 0), std::move(max_over_ranks)));
}

MemoryCheckpoints::MemoryCheckpoints(std::unique_ptr<ckpt::HostCheckpoints> host, int64_t every,
                                     MaxOverRanks max_over_ranks)
    : host_(std::move(host)), every_(every), max_over_ranks_(std::move(max_over_ranks)) {
  const std::string where = host_->replicates() ? log::sprintf(", replicated on rank %d's node", host_->peer())
                                                : std::string(" (one node: no replica on another)");
  if (every_ > 0)
    log::progress("in-memory checkpoints every %lld step(s): each rank's state in its node's memory%s",
                  static_cast<long long>(every_), where.c_str());
  else
    log::progress("in-memory checkpoints: each rank's state in its node's memory%s; the interval is set from "
                  "what one costs, measured %lld steps after the start", where.c_str(),
                  static_cast<long long>(kProbeAfter));
}

void MemoryCheckpoints::start_at(int64_t step) { probe_step_ = step + kProbeAfter; }

bool MemoryCheckpoints::due(int64_t done) const { return every_ > 0 ? done % every_ == 0 : done == probe_step_; }

void MemoryCheckpoints::take(int64_t done, std::vector<ShardedTensor> blocks, const ckpt::SaveInfo& info,
                             double step_s) {
  const auto t0 = std::chrono::steady_clock::now();
  // Every rank's previous snapshot complete, the newest step they all hold: older ones may go (HostCheckpoints).
  host_->wait();
  const auto keep_from = static_cast<int64_t>(-max_over_ranks_(-static_cast<double>(host_->newest_own())));
  // The buffers are free (the previous writer is done); the copies into them land while the next step runs.
  const auto stats = host_->save_async(done, staging_.stage(blocks), info, keep_from, staging_.landed());
  log::debug("in-memory checkpoint of step %lld: step loop blocked %.3fs (the previous one's wait included), %.1f MB",
             static_cast<long long>(done), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
             static_cast<double>(stats.bytes) / 1e6);
  if (every_ > 0) return;
  host_->wait();
  set_interval(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), step_s);
}

void MemoryCheckpoints::set_interval(double cost_s, double step_s) {
  const double cost = max_over_ranks_(cost_s), step = std::max(max_over_ranks_(step_s), 1e-6);
  every_ = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(cost / (kBudget * step))));
  log::progress("in-memory checkpoints every %lld step(s): one costs %.1f ms (copy, write and replica swap) against "
                "a %.1f ms step, %.1f %% of the time at this interval (checkpoint.memory_every N sets it)",
                static_cast<long long>(every_), cost * 1e3, step * 1e3,
                100.0 * cost / (step * static_cast<double>(every_)));
}

}  // namespace meshtrain::train
