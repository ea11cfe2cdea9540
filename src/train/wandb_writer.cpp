#include "meshtrain/train/wandb_writer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/train/tensorboard_writer.h"

extern char** environ;

namespace meshtrain::train {
namespace {

namespace fs = std::filesystem;

// The bridge: its first stdin line starts the run, every later line is one wandb.log call, end of input
// finishes the run. Its answer to the start goes to fd 3 (its stdout is wandb's, sent to stderr), one line.
constexpr const char* kBridge = R"PY(
import json, os, sys
answer = os.fdopen(3, "w")
sys.stdout = sys.stderr
os.environ.setdefault("WANDB_SILENT", "true")
try:
    start = json.loads(sys.stdin.readline())
    import wandb
    run = wandb.init(project=start["project"], dir=start["dir"], name=start["name"], id=start["id"],
                     resume="allow", mode=start["mode"], config=start["config"])
except BaseException as e:
    answer.write(" ".join(f"{type(e).__name__}: {e}".split()) + "\n")
    answer.flush()
    sys.exit(1)
answer.write("ready\n")
answer.close()
rows = []
for line in sys.stdin:
    m = json.loads(line)
    data = dict(m["metrics"])
    if m["texts"]:
        rows += [[m["step"], tag, text] for tag, text in m["texts"]]
        data["samples"] = wandb.Table(columns=["step", "tag", "text"], data=rows)
    run.log(data, step=m["step"])
run.finish()
)PY";

// Long enough for wandb.init to start its service on a loaded machine; online it also reaches the server.
constexpr int kStartTimeoutMs = 180'000;
constexpr int kFinishTimeoutS = 300;

// The run id a resumed run continues: <dir>/wandb/run_id, else a new random one saved there.
std::string kept_run_id(const std::string& dir) {
  const fs::path path = fs::path(dir) / "wandb" / "run_id";
  std::string id;
  if (std::ifstream in(path); in && std::getline(in, id) && !id.empty()) return id;
  std::random_device rd;
  const char* digits = "abcdefghijklmnopqrstuvwxyz0123456789";
  for (int i = 0; i < 8; ++i) id.push_back(digits[rd() % 36]);
  fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + ".tmp";
  std::ofstream(tmp) << id << "\n";
  fs::rename(tmp, path);  // never a half-written id for the next resume to read
  return id;
}

}  // namespace

WandbWriter::WandbWriter(const Options& o) : run_id_(kept_run_id(o.dir)) {
  // A socket for the bridge's stdin: send(MSG_NOSIGNAL) turns a dead bridge into an error, not a SIGPIPE.
  int in[2], out[2];
  SYS_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in), "socketpair");
  SYS_CHECK(::pipe2(out, O_CLOEXEC), "pipe2");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[1], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 3);
  std::vector<std::string> args = {o.python, "-u", "-c", kBridge};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = ::posix_spawnp(&pid_, o.python.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[1]);
  ::close(out[1]);
  to_bridge_ = in[0];
  from_bridge_ = out[0];
  if (rc != 0) {
    pid_ = -1;  // no child: posix_spawnp leaves the pid unspecified on failure
    abandon();
    throw UserError(cat("logging.wandb_python: cannot start '", o.python, "': ", std::strerror(rc)));
  }
  send({{"project", o.project}, {"dir", o.dir}, {"name", o.name}, {"id", run_id_},
        {"mode", std::string(enum_name(o.mode))}, {"config", o.config}});
  std::string answer;
  try {
    answer = read_answer();
  } catch (...) {
    abandon();
    throw;
  }
  if (answer != "ready") {
    abandon();
    throw UserError(cat("logging.wandb: ", o.python, " could not start a W&B run: ",
                        answer.empty() ? "it ended without saying why" : answer,
                        " (logging.wandb_python names a Python with the `wandb` package: pip install wandb)"));
  }
  log::info("wandb: run %s (%s) in %s/wandb", run_id_.c_str(), enum_c_str(o.mode), o.dir.c_str());
}

std::string WandbWriter::read_answer() {
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kStartTimeoutMs);
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    MT_CHECK(left.count() > 0, "wandb: no answer from the bridge within ", kStartTimeoutMs / 1000, " s");
    pollfd p{from_bridge_, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    SYS_CHECK(n, "poll");
    char buf[512];
    const ssize_t got = ::read(from_bridge_, buf, sizeof buf);
    if (got <= 0) break;  // the bridge ended: what it said so far is the answer
    line.append(buf, static_cast<size_t>(got));
  }
  return line.substr(0, line.find('\n'));
}

bool WandbWriter::send(const nlohmann::json& message) {
  if (broken_) return false;
  const std::string line = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = ::send(to_bridge_, line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      log::warn("wandb: the bridge stopped reading (%s); later metrics go to metrics.jsonl only",
                std::strerror(errno));
      broken_ = true;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

void WandbWriter::log(const nlohmann::json& record, const std::vector<std::pair<std::string, std::string>>& texts) {
  if (!record.contains("step")) return;
  nlohmann::json metrics = nlohmann::json::object();
  for (const auto& [tag, value] : tensorboard_scalars(record)) metrics[tag] = value;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [tag, text] : texts) rows.push_back({tag, text});
  send({{"step", record["step"]}, {"metrics", metrics}, {"texts", rows}});
}

WandbWriter::~WandbWriter() { stop(); }

void WandbWriter::close_pipes() {
  if (to_bridge_ >= 0) ::close(to_bridge_);
  if (from_bridge_ >= 0) ::close(from_bridge_);
  to_bridge_ = from_bridge_ = -1;
}

void WandbWriter::abandon() {
  close_pipes();
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
}

void WandbWriter::stop() {
  // End of input makes the bridge call wandb.finish(); wait for it (bounded), so that an offline run
  // directory is complete when the trainer exits.
  close_pipes();
  if (pid_ <= 0) return;
  int status = 0;
  for (int waited = 0; ::waitpid(pid_, &status, WNOHANG) == 0; ++waited) {
    if (waited == kFinishTimeoutS * 10) {
      log::warn("wandb: the bridge did not finish within %d s; stopping it", kFinishTimeoutS);
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      status = 0;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (status != 0) log::warn("wandb: the bridge ended with status %d; the W&B run may be incomplete", status);
  pid_ = -1;
}

}  // namespace meshtrain::train
