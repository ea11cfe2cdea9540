// meshrun's command line: the flags, their defaults, and their PET_* environment fallbacks, spelled as
// torchrun spells them (`--nproc-per-node` and `--nproc_per_node`) so existing launch scripts work unchanged.
// Parsing stops at the first argument that is not a flag (the program); everything after it belongs to the
// program. A flag given on the command line beats PET_<FLAG> in the environment, which beats the default.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace meshtrain::launch {

// How the program is run (decided from the flags and the program's name).
enum class ProgramKind {
  Config,   // CONFIG.yaml|.yml|.json → `<dir of meshrun>/meshtrain train CONFIG args…`
  Python,   // anything else without --no-python → `python -u PROGRAM args…` (torchrun does the same)
  Module,   // --module → `python -u -m MODULE args…`
  Native,   // --no-python → PROGRAM args… as is
};

struct LaunchOptions {
  // --- workers -----------------------------------------------------------------------------------------
  std::string nproc_per_node = "1";  // N | cpu | gpu | auto (see resolve_nproc_per_node)
  std::string nnodes = "1";          // N or N:N (elastic ranges with min != max are not supported)
  int node_rank = 0;                 // this node's rank in [0, nnodes)
  std::string role = "default";      // ROLE_NAME
  bool virtual_local_rank = false;   // LOCAL_RANK=0, CUDA_VISIBLE_DEVICES = the worker's GPU only
  bool preflight = false;            // `meshtrain doctor` on this node first; a failing check stops the launch
  // --- rendezvous ----------------------------------------------------------------------------------------
  std::string master_addr = "127.0.0.1";  // node 0's address; workers get it as MASTER_ADDR
  int master_port = 29500;                 // the store's port; 0 = any free port
  bool standalone = false;                 // single node, loopback, a free port, a fresh run id
  std::string run_id = "none";             // TORCHELASTIC_RUN_ID (torchrun: --rdzv-id)
  std::string rdzv_backend = "static";     // accepted for compatibility: static | c10d
  std::string rdzv_endpoint;               // host[:port]; overrides --master-addr/--master-port
  double rdzv_timeout = 600;               // seconds to reach node 0's store and for every node to join
  std::string rdzv_conf;                   // torchrun's K=V,... (torchrun_compat.h)
  std::string rdzv_token_file;             // --rdzv-conf token_file=PATH: the job's secret (rdzv_token.h)
  std::string local_addr;                  // this node's address; names it in failure reports
  // --- supervision ---------------------------------------------------------------------------------------
  int max_restarts = 0;            // whole-group restarts after a worker failure
  // auto: a meshtrain config resuming with checkpoint.resume auto gets a killed worker replaced alone, the
  // others regrouping with it in their processes (LaunchPlan::in_place_restart); off: the group restarts.
  std::string in_place_restart = "auto";
  double monitor_interval = 0.1;   // seconds between liveness checks (SIGCHLD wakes us earlier)
  double shutdown_timeout = 30.0;  // seconds between SIGTERM and SIGKILL when tearing a group down
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2";
  // --- logs ----------------------------------------------------------------------------------------------
  std::string log_dir;             // per-rank logs under <log_dir>/<run_id>/attempt_<k>/<rank>/
  std::string redirects = "0";     // 0 none, 1 stdout, 2 stderr, 3 both; or per local rank "0:1,1:3"
  std::string tee = "0";           // same syntax; tee = files and console
  std::string local_ranks_filter;  // "0,2": show only these local ranks on the console (files keep all)
  std::string log_line_prefix_template;  // "${rank}"-style console prefix; empty = "[rank N]: "
  std::string logs_specs;          // torchrun's LogsSpecs entry point: accepted, ignored
  // --- placement -----------------------------------------------------------------------------------------
  std::string numa_binding = "node";  // none | node | socket | exclusive (cpu_binding.h; why node: docs)
  // --- program -------------------------------------------------------------------------------------------
  bool no_python = false;
  bool module = false;
  bool run_path = false;             // torchrun's runpy.run_path: run PROGRAM under python whatever else says
  std::string start_method = "spawn";  // torchrun's multiprocessing start method: accepted
  std::string program;               // the first non-flag argument
  std::vector<std::string> program_args;
  bool help = false;
  bool version = false;
  // Canonical names of the flags given on the command line or through PET_* (Slurm fills only the others).
  std::set<std::string> explicitly_set;
};

// Environment lookup; returns nullopt when unset. Injected so tests need not touch the real environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// Parses argv (without argv[0]). Throws UserError with one line naming the flag and what is valid.
LaunchOptions parse_launch_options(const std::vector<std::string>& args, const EnvLookup& env = process_env());

// `--help` text: flags grouped, defaults shown, PET_* fallbacks explained.
std::string launch_usage();

// N | cpu | gpu | auto → a worker count. torchrun's rules: cpu = online cores; gpu = visible GPUs (error
// when none); auto = GPUs when there are any, else cores. `gpu_count` is injected for tests.
int resolve_nproc_per_node(const std::string& value, int gpu_count, int cpu_count);

// "N" → {N, N}; "MIN:MAX" → {MIN, MAX} (elastic: the job goes on with at least MIN nodes, docs/launcher.md
// "Elastic membership"); UserError for anything else.
struct NodeCount {
  int min = 1, max = 1;
};
NodeCount parse_nnodes(const std::string& value);

// Number of GPUs this process may use without initialising CUDA: CUDA_VISIBLE_DEVICES when set, else the
// /dev/nvidia<N> device nodes.
int visible_gpu_count();

// Redirect/tee spec → per-stream bitmask (1 stdout, 2 stderr) for `local_rank`.
int std_streams_mask(const std::string& spec, int local_rank, const char* flag);

// "0,2,5" → true for listed local ranks; an empty filter shows every rank.
bool rank_shown(const std::string& filter, int local_rank);

// UserError unless every rank in --local-ranks-filter is a local rank of `nproc` workers (a filter naming
// none of them would hide every line without a word).
void check_local_ranks_filter(const std::string& filter, int nproc);

}  // namespace meshtrain::launch
