// LaunchOptions (what the user said) → LaunchPlan (what meshrun will do): the worker command line, counts,
// the store's address and port, the run id, the signals to forward. Resolving is separate from running so
// it can be unit-tested and printed.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "meshtrain/launch/launch_options.h"

namespace meshtrain::launch {

struct LaunchPlan {
  LaunchOptions opts;
  ProgramKind kind = ProgramKind::Python;
  std::vector<std::string> command;  // every worker's argv
  int nproc_per_node = 1;
  int gpu_count = 0;       // GPUs visible on this node (visible_gpu_count())
  int nnodes = 1;      // at most (--nnodes N or MIN:MAX); a round's workers see the nodes that joined it
  int min_nnodes = 1;  // at least (elastic --nnodes MIN:MAX; equal to nnodes otherwise)
  int node_rank = 0;   // this node's --node-rank (its name; its rank in a round is its place among the round's)
  std::string master_addr;
  int master_port = 0;     // 0 until the store is bound (--standalone / --master-port 0)
  bool host_store = true;  // node 0 hosts the store
  bool loopback_store = true;  // --master-addr is loopback on a single node (the store never leaves the host)
  // The workers' MASTER_PORT: this node's relay to the store on 127.0.0.1 (store_relay.h); set when the
  // launcher starts it.
  int relay_port = 0;
  std::string run_id;
  std::string log_folder;  // <log-dir>/<run-id-or-dated-name>; empty = no --log-dir
  std::vector<int> forwarded_signals;
  // A worker killed by a signal is started again alone (WorkerGroup) and the others regroup with it
  // (train/in_place_restart.h): --in-place-restart auto and a meshtrain config with checkpoint.resume auto.
  bool in_place_restart = false;
  std::string store_exe;  // <dir of meshrun>/meshrun-store, the store helper (rendezvous_host.h)
  // Variables every worker gets on top of torchrun's: a config program's comm.nccl_env (validated by name).
  std::map<std::string, std::string> worker_env;
};

// `self_dir`: the directory of the meshrun binary (where `meshtrain` is looked for). `gpu_count` and
// `cpu_count` come from the node (visible_gpu_count(), online cores) and are injected for tests.
LaunchPlan make_launch_plan(const LaunchOptions& o, const std::string& self_dir, int gpu_count, int cpu_count);

// For a config program: loads it with the `--set` overrides among the program arguments, resolves and
// validates it for the plan's world size (nnodes × nproc_per_node), so a bad config is one line and exit 2
// before any worker starts; on a GPU node, more workers than GPUs is refused unless the config asks for the
// CPU backend (then the workers share the GPUs round-robin, said in one line). Its comm.nccl_env goes into
// plan.worker_env. Sets plan.in_place_restart. No-op for other programs.
void validate_config_program(LaunchPlan& plan);

// UserError when a GPU node would get more workers than GPUs; `config_hint` says how the config could ask
// for the CPU backend instead.
void check_gpu_per_worker(const LaunchPlan& plan, const std::string& config_hint);

// The one line said when a node's workers outnumber its GPUs and share them round-robin (a CPU backend);
// empty when every worker has a GPU of its own or the node has none.
std::string gpu_sharing_note(const LaunchPlan& plan);

// Directory holding the running executable (/proc/self/exe).
std::string self_exe_dir();

// Whether `addr` names this host's loopback (127.x, ::1, localhost).
bool is_loopback_address(const std::string& addr);

}  // namespace meshtrain::launch
