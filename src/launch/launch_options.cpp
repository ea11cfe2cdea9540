// Flag table → LaunchOptions. One table drives parsing, the PET_* fallbacks and --help, so the three never
// disagree. Hand-written rather than cxxopts: torchrun's contract (stop at the program, pass the rest
// through untouched, underscore spellings, PET_* env) is easier to honour exactly with 100 lines of our own.
#include "meshtrain/launch/launch_options.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/launch/endpoint.h"
#include "meshtrain/launch/torchrun_compat.h"

namespace meshtrain::launch {
namespace {

enum class Kind { String, Int, Double, Bool };

struct Flag {
  const char* name;   // canonical long name without dashes, e.g. "nproc-per-node"
  const char* alias;  // extra spelling or nullptr (short flags like "m")
  Kind kind;
  const char* group;
  const char* metavar;
  const char* help;
  // `src` is how the user gave it ("--master-port" or "PET_MASTER_PORT"), for messages.
  std::function<void(LaunchOptions&, const std::string& value, const std::string& src)> set;
  std::function<std::string(const LaunchOptions&)> show_default;
};

int to_int(const std::string& src, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v.c_str(), &end, 10);
  MT_USER_CHECK(!v.empty() && end && *end == '\0' && errno == 0 && x >= -2147483647L && x <= 2147483647L,
                "meshrun: ", src, " expects an integer, got '", v, "'");
  return static_cast<int>(x);
}

double to_double(const std::string& src, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  MT_USER_CHECK(!v.empty() && end && *end == '\0' && x >= 0, "meshrun: ", src,
                " expects a non-negative number of seconds, got '", v, "'");
  return x;
}

bool to_bool(const std::string& src, const std::string& v) {
  std::string l = v;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  if (l == "1" || l == "true" || l == "yes" || l == "on") return true;
  if (l == "0" || l == "false" || l == "no" || l == "off" || l.empty()) return false;
  throw UserError(cat("meshrun: ", src, " must be 0 or 1, got '", v, "'"));
}

#define MT_STR(field)                                                                   \
  [](LaunchOptions& o, const std::string& v, const std::string&) { o.field = v; },      \
      [](const LaunchOptions& o) { return o.field; }
#define MT_INT(field)                                                                     \
  [](LaunchOptions& o, const std::string& v, const std::string& s) { o.field = to_int(s, v); }, \
      [](const LaunchOptions& o) { return std::to_string(o.field); }
#define MT_PORT(field)                                                                    \
  [](LaunchOptions& o, const std::string& v, const std::string& s) { o.field = parse_port(v, s, true); }, \
      [](const LaunchOptions& o) { return std::to_string(o.field); }
#define MT_DBL(field)                                                                     \
  [](LaunchOptions& o, const std::string& v, const std::string& s) { o.field = to_double(s, v); }, \
      [](const LaunchOptions& o) {                                               \
        std::ostringstream s;                                                    \
        s << o.field;                                                            \
        return s.str();                                                          \
      }
#define MT_BOOL(field)                                                                    \
  [](LaunchOptions& o, const std::string& v, const std::string& s) { o.field = to_bool(s, v); }, \
      [](const LaunchOptions& o) { return std::string(o.field ? "on" : "off"); }

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {"nproc-per-node", nullptr, Kind::String, "Workers", "N|cpu|gpu|auto",
       "workers on this node; gpu = visible GPUs, cpu = cores, auto = GPUs if any else cores",
       MT_STR(nproc_per_node)},
      {"nnodes", nullptr, Kind::String, "Workers", "N", "number of nodes: N, or MIN:MAX (elastic: a node lost for "
       "--rdzv-timeout is left out and the job goes on with the others while at least MIN remain; a node that "
       "starts late is admitted by a restart; node 0 hosts the store and must stay)", MT_STR(nnodes)},
      {"node-rank", nullptr, Kind::Int, "Workers", "R", "rank of this node in [0, nnodes)",
       MT_INT(node_rank)},
      {"role", nullptr, Kind::String, "Workers", "NAME", "ROLE_NAME given to the workers", MT_STR(role)},
      {"virtual-local-rank", nullptr, Kind::Bool, "Workers", "",
       "every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES narrowed to its own GPU (as torchrun)",
       MT_BOOL(virtual_local_rank)},
      {"preflight", nullptr, Kind::Bool, "Workers", "",
       "run `meshtrain doctor` on this node first (GPU health, NVLink, PCIe, clocks, temperature, all-reduce "
       "rate, checkpoint disk; with the config when the program is one) and stop with its exit code when a "
       "check fails",
       MT_BOOL(preflight)},
      {"master-addr", nullptr, Kind::String, "Rendezvous", "HOST",
       "address of node 0, where the store is hosted", MT_STR(master_addr)},
      {"master-port", nullptr, Kind::Int, "Rendezvous", "PORT", "port of the store on node 0 (0 = any free)",
       MT_PORT(master_port)},
      {"standalone", nullptr, Kind::Bool, "Rendezvous", "",
       "single node: loopback store on a free port, fresh run id", MT_BOOL(standalone)},
      {"run-id", "rdzv-id", Kind::String, "Rendezvous", "ID", "TORCHELASTIC_RUN_ID; names the log folder",
       MT_STR(run_id)},
      {"rdzv-backend", nullptr, Kind::String, "Rendezvous", "static|c10d",
       "accepted for torchrun compatibility; the store is always a TCPStore on node 0", MT_STR(rdzv_backend)},
      {"rdzv-endpoint", nullptr, Kind::String, "Rendezvous", "HOST[:PORT]",
       "overrides --master-addr/--master-port", MT_STR(rdzv_endpoint)},
      {"rdzv-conf", nullptr, Kind::String, "Rendezvous", "K=V,...",
       "torchrun's rendezvous options: timeout or join_timeout (seconds) set --rdzv-timeout; token_file=PATH "
       "names the job's store token (a file only you can read; or set MESHRUN_RDZV_TOKEN); other keys are "
       "accepted and ignored with a line (the store is static)", MT_STR(rdzv_conf)},
      {"local-addr", nullptr, Kind::String, "Rendezvous", "ADDR",
       "this node's address as the other nodes see it; names this node in failure reports (default: the "
       "host name)", MT_STR(local_addr)},
      {"rdzv-timeout", nullptr, Kind::Double, "Rendezvous", "SEC",
       "multi-node: how long to wait for node 0's store and for every node to join a round",
       MT_DBL(rdzv_timeout)},
      {"max-restarts", nullptr, Kind::Int, "Supervision", "N",
       "restarts of the whole group after a worker fails; never after a root cause that exited 2 "
       "(invalid input: a bad config, flag or file, which a restart would repeat)", MT_INT(max_restarts)},
      {"in-place-restart", nullptr, Kind::String, "Supervision", "auto|off",
       "auto: for a meshtrain config with checkpoint.resume auto, a worker killed by a signal is started again "
       "alone and the other workers regroup with it without restarting (from the in-memory checkpoints); at most "
       "--max-restarts of them per attempt; a worker that exits with an error still restarts the group. off: "
       "always restart the whole group", MT_STR(in_place_restart)},
      {"monitor-interval", nullptr, Kind::Double, "Supervision", "SEC",
       "liveness check period (exits are also noticed at once through SIGCHLD)",
       MT_DBL(monitor_interval)},
      {"shutdown-timeout", nullptr, Kind::Double, "Supervision", "SEC",
       "grace between SIGTERM and SIGKILL when stopping workers", MT_DBL(shutdown_timeout)},
      {"signals-to-handle", nullptr, Kind::String, "Supervision", "LIST",
       "signals forwarded to every worker (never restart the group)", MT_STR(signals_to_handle)},
      {"log-dir", nullptr, Kind::String, "Logs", "DIR",
       "write <DIR>/<run-id>/attempt_<k>/<rank>/{stdout,stderr}.log (and error.json)", MT_STR(log_dir)},
      {"redirects", "r", Kind::String, "Logs", "SPEC",
       "streams sent to files only: 0 none, 1 stdout, 2 stderr, 3 both, or per rank 0:1,1:2", MT_STR(redirects)},
      {"tee", "t", Kind::String, "Logs", "SPEC", "streams written to files as well (same syntax)", MT_STR(tee)},
      {"local-ranks-filter", nullptr, Kind::String, "Logs", "LIST",
       "show only these local ranks on the console, e.g. 0,3 (files keep all)", MT_STR(local_ranks_filter)},
      {"log-line-prefix-template", nullptr, Kind::String, "Logs", "TEMPLATE",
       "console prefix of each worker line; ${rank}, ${local_rank} and ${role_name} are replaced (also read "
       "from TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, as torchrun does) [default: \"[rank ${rank}]: \"]",
       MT_STR(log_line_prefix_template)},
      {"logs-specs", nullptr, Kind::String, "Logs", "NAME",
       "torchrun's LogsSpecs entry point (a Python class): accepted and ignored with a line; meshrun's log "
       "layout is --log-dir's", MT_STR(logs_specs)},
      {"numa-binding", nullptr, Kind::String, "Placement", "MODE",
       "pin each worker to CPUs near its GPU: none | node (its NUMA node) | socket | exclusive (a disjoint "
       "share of the node's cores)", MT_STR(numa_binding)},
      {"no-python", nullptr, Kind::Bool, "Program", "", "run PROGRAM as is, not under python",
       MT_BOOL(no_python)},
      {"run-path", nullptr, Kind::Bool, "Program", "",
       "run PROGRAM as a Python script even with --no-python or --module (torchrun: runpy.run_path in the "
       "launcher's interpreter; meshrun: `python -u PROGRAM`)", MT_BOOL(run_path)},
      {"start-method", nullptr, Kind::String, "Program", "spawn|fork|forkserver",
       "torchrun's Python multiprocessing start method; meshrun always starts a fresh process (spawn), so "
       "fork and forkserver are accepted and ignored with a line", MT_STR(start_method)},
      {"module", "m", Kind::Bool, "Program", "", "PROGRAM is a Python module (python -m)",
       MT_BOOL(module)},
      {"help", "h", Kind::Bool, "Program", "", "show this help", MT_BOOL(help)},
      {"version", nullptr, Kind::Bool, "Program", "", "show the version", MT_BOOL(version)},
  };
  return table;
}

std::string dashes(std::string s) {
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

std::string pet_name(const std::string& name) {
  std::string e = "PET_";
  for (char c : name) e += (c == '-') ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return e;
}

const Flag* find_flag(const std::string& spelled) {
  std::string n = dashes(spelled);
  for (const Flag& f : flags())
    if (n == f.name || (f.alias && n == f.alias)) return &f;
  return nullptr;
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& k) -> std::optional<std::string> {
    const char* v = std::getenv(k.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

namespace {

// PET_<FLAG> (and PET_<ALIAS> for long aliases such as PET_RDZV_ID): below the command line, above defaults.
void apply_pet_env(LaunchOptions& o, const EnvLookup& env) {
  for (const Flag& f : flags()) {
    if (std::string(f.name) == "help" || std::string(f.name) == "version") continue;
    std::string src = pet_name(f.name);
    std::optional<std::string> v = env(src);
    if (!v && f.alias && std::string(f.alias).size() > 1) v = env(src = pet_name(f.alias));
    if (v) {
      f.set(o, *v, src);
      o.explicitly_set.insert(f.name);
    }
  }
  // torchrun reads the prefix template only from this variable; the flag (or PET_) wins over it.
  if (auto t = env("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); t && o.log_line_prefix_template.empty())
    o.log_line_prefix_template = *t;
}

// The flags up to the program; returns the index of the program (args.size() when there is none).
size_t apply_flags(LaunchOptions& o, const std::vector<std::string>& args) {
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") return i + 1;
    if (a.size() < 2 || a[0] != '-') break;  // the program: everything from here on is its own
    std::string body = a.substr(a[1] == '-' ? 2 : 1);
    std::optional<std::string> inline_value;
    if (auto eq = body.find('='); eq != std::string::npos) {
      inline_value = body.substr(eq + 1);
      body = body.substr(0, eq);
    }
    const Flag* f = find_flag(body);
    MT_USER_CHECK(f, "meshrun: unknown flag '", a, "' (see meshrun --help)");
    o.explicitly_set.insert(f->name);
    const std::string src = "--" + std::string(f->name);
    if (f->kind == Kind::Bool) {
      f->set(o, inline_value ? *inline_value : "1", src);
      continue;
    }
    if (!inline_value)
      MT_USER_CHECK(i + 1 < args.size(), "meshrun: ", src, " needs a value (", f->metavar, ")");
    f->set(o, inline_value ? *inline_value : args[++i], src);
  }
  return i;
}

// --rdzv-endpoint HOST[:PORT] overrides --master-addr (and --master-port when it has a port).
void apply_endpoint(LaunchOptions& o) {
  o.master_addr = parse_host(o.master_addr, "--master-addr");
  if (o.rdzv_endpoint.empty()) return;
  Endpoint ep = parse_endpoint(o.rdzv_endpoint, "--rdzv-endpoint", /*any_free_port=*/true);
  o.master_addr = ep.host;
  if (ep.port) o.master_port = *ep.port;
}

// Validation, one place, messages that name the flag and what is valid.
void validate(LaunchOptions& o) {
  int nn = parse_nnodes(o.nnodes).max;
  MT_USER_CHECK(o.node_rank >= 0 && o.node_rank < nn, "meshrun: --node-rank ", o.node_rank,
                " is outside [0, nnodes=", nn, ")");
  MT_USER_CHECK(o.max_restarts >= 0, "meshrun: --max-restarts must be >= 0, got ", o.max_restarts);
  MT_USER_CHECK(o.in_place_restart == "auto" || o.in_place_restart == "off", "meshrun: --in-place-restart must be "
                "auto or off, got '", o.in_place_restart, "'");
  MT_USER_CHECK(o.monitor_interval > 0, "meshrun: --monitor-interval must be > 0");
  MT_USER_CHECK(o.rdzv_timeout > 0, "meshrun: --rdzv-timeout must be > 0");
  MT_USER_CHECK(o.numa_binding == "none" || o.numa_binding == "node" || o.numa_binding == "socket" ||
                    o.numa_binding == "exclusive",
                "meshrun: --numa-binding must be none, node, socket or exclusive, got '", o.numa_binding, "'");
  MT_USER_CHECK(o.rdzv_backend == "static" || o.rdzv_backend == "c10d", "meshrun: --rdzv-backend '",
                o.rdzv_backend, "' is not supported (static or c10d)");
  MT_USER_CHECK(o.start_method == "spawn" || o.start_method == "fork" || o.start_method == "forkserver",
                "meshrun: --start-method must be spawn, fork or forkserver, got '", o.start_method, "'");
  // torchrun: --run-path takes precedence over --no-python (and --module).
  MT_USER_CHECK(o.run_path || !(o.no_python && o.module),
                "meshrun: --no-python and --module cannot be used together");
  MT_USER_CHECK(!(o.standalone && nn > 1), "meshrun: --standalone is single-node; got --nnodes ", o.nnodes);
  if (!o.local_addr.empty()) o.local_addr = parse_host(o.local_addr, "--local-addr");
  apply_endpoint(o);
  apply_rdzv_conf(o);
  (void)std_streams_mask(o.redirects, 0, "redirects");
  (void)std_streams_mask(o.tee, 0, "tee");
  (void)rank_shown(o.local_ranks_filter, 0);
}

}  // namespace

LaunchOptions parse_launch_options(const std::vector<std::string>& args, const EnvLookup& env) {
  LaunchOptions o;
  apply_pet_env(o, env);
  const size_t i = apply_flags(o, args);
  if (o.help || o.version) return o;
  MT_USER_CHECK(i < args.size(), "meshrun: no program given; usage: meshrun [options] CONFIG.yaml|PROGRAM.py|"
                                 "--no-python PROGRAM [args...]");
  o.program = args[i];
  o.program_args.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  validate(o);
  return o;
}

void check_local_ranks_filter(const std::string& filter, int nproc) {
  std::stringstream ss(filter);
  bool any = false;
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    any = true;
    const int r = to_int("--local-ranks-filter", item);
    MT_USER_CHECK(r >= 0 && r < nproc, "meshrun: --local-ranks-filter '", filter, "': local rank ", r,
                  " does not exist; with ", nproc, " worker(s) per node the local ranks are 0..", nproc - 1);
  }
  MT_USER_CHECK(filter.empty() || any, "meshrun: --local-ranks-filter '", filter,
                "' names no local rank; give a comma-separated list such as 0,1");
}

NodeCount parse_nnodes(const std::string& value) {
  auto colon = value.find(':');
  if (colon == std::string::npos) {
    int n = to_int("--nnodes", value);
    MT_USER_CHECK(n >= 1, "meshrun: --nnodes must be >= 1, got ", n);
    return {n, n};
  }
  int lo = to_int("--nnodes", value.substr(0, colon));
  int hi = to_int("--nnodes", value.substr(colon + 1));
  MT_USER_CHECK(lo >= 1 && lo <= hi, "meshrun: --nnodes ", value, ": give N or MIN:MAX with 1 <= MIN <= MAX");
  return {lo, hi};
}

int resolve_nproc_per_node(const std::string& value, int gpu_count, int cpu_count) {
  if (value == "cpu") return cpu_count;
  if (value == "gpu") {
    MT_USER_CHECK(gpu_count > 0, "meshrun: --nproc-per-node gpu, but no GPU is visible on this node "
                                 "(CUDA_VISIBLE_DEVICES / /dev/nvidia*); give a number or 'cpu'");
    return gpu_count;
  }
  if (value == "auto") return gpu_count > 0 ? gpu_count : cpu_count;
  char* end = nullptr;
  long n = std::strtol(value.c_str(), &end, 10);
  MT_USER_CHECK(!value.empty() && end && *end == '\0' && n >= 1 && n <= 4096, "meshrun: --nproc-per-node '",
                value, "' is not valid: give a positive number, cpu, gpu or auto");
  return static_cast<int>(n);
}

int visible_gpu_count() {
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string s = cvd;
    if (s.empty() || s == "-1" || s == "NoDevFiles") return 0;
    // A list of indices or UUIDs; an invalid entry ends the list (CUDA's rule).
    int n = 0;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (item.empty() || item[0] == '-') break;
      ++n;
    }
    return n;
  }
  int n = 0;
  if (DIR* d = opendir("/dev")) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
          std::all_of(name.begin() + 6, name.end(), [](unsigned char c) { return std::isdigit(c); }))
        ++n;
    }
    closedir(d);
  }
  return n;
}

int std_streams_mask(const std::string& spec, int local_rank, const char* flag) {
  auto one = [&](const std::string& v) {
    MT_USER_CHECK(v == "0" || v == "1" || v == "2" || v == "3", "meshrun: --", flag, " '", spec,
                  "': each value must be 0 (none), 1 (stdout), 2 (stderr) or 3 (both)");
    return v[0] - '0';
  };
  if (spec.find(':') == std::string::npos) return one(spec.empty() ? "0" : spec);
  int mask = 0;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto colon = item.find(':');
    MT_USER_CHECK(colon != std::string::npos, "meshrun: --", flag, " '", spec,
                  "': mix of plain and per-rank values; use e.g. 0:1,1:3");
    int r = to_int(cat("--", flag), item.substr(0, colon));
    int m = one(item.substr(colon + 1));
    if (r == local_rank) mask = m;
  }
  return mask;
}

bool rank_shown(const std::string& filter, int local_rank) {
  if (filter.empty()) return true;
  std::stringstream ss(filter);
  std::string item;
  bool shown = false;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    if (to_int("--local-ranks-filter", item) == local_rank) shown = true;
  }
  return shown;
}

std::string launch_usage() {
  std::ostringstream u;
  u << "usage: meshrun [options] CONFIG.yaml|CONFIG.json [args...]   (runs `meshtrain train CONFIG`)\n"
       "       meshrun [options] PROGRAM.py [args...]                 (runs `python -u PROGRAM.py`)\n"
       "       meshrun [options] --no-python PROGRAM [args...]        (runs PROGRAM as is)\n\n"
       "torchrun-compatible launcher: one worker per GPU, a c10d TCPStore on node 0, the torchrun worker\n"
       "environment (RANK, WORLD_SIZE, MASTER_ADDR, ...), restarts on failure, signals forwarded.\n"
       "Every flag may be spelled with '_' for '-' and set from the environment as PET_<FLAG>\n"
       "(e.g. PET_NPROC_PER_NODE=4); the command line wins.\n";
  LaunchOptions defaults;
  std::string group;
  for (const Flag& f : flags()) {
    if (group != f.group) {
      group = f.group;
      u << "\n" << group << ":\n";
    }
    std::string left = std::string("  --") + f.name;
    if (f.alias) left += std::string(std::strlen(f.alias) == 1 ? ", -" : ", --") + f.alias;
    if (*f.metavar) left += std::string(" ") + f.metavar;
    if (left.size() < 34) left.resize(34, ' ');
    else left += "\n" + std::string(34, ' ');
    u << left << f.help;
    std::string def = f.show_default(defaults);
    if (f.kind != Kind::Bool && !def.empty()) u << " [default: " << def << "]";
    u << "\n";
  }
  u << "\nExit code: 0 when every worker exits 0, and never 0 for a failed job; otherwise the root-cause\n"
       "worker's exit code (128+N for signal N; with several nodes, another node's root cause when this\n"
       "node's workers did not fail, else 1); 128+N when meshrun itself was stopped by signal N; 2 for a bad\n"
       "command line. A root cause that exited 2 (invalid input) is not restarted.\n";
  return u.str();
}

}  // namespace meshtrain::launch
