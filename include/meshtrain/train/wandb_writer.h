// WandbWriter: a run's metrics, samples and resolved config in Weights & Biases, through W&B's own `wandb`
// Python package (there is no C++ client): a child Python process (logging.wandb_python) runs a small bridge
// that reads one JSON object a line from its stdin and calls wandb.init / wandb.log / wandb.finish.
//
//   WandbWriter w({.mode = WandbMode::offline, .dir = out_dir, .config = to_json(cfg), ...});   // rank 0
//   w.log(step, record, texts);      // every number of the metrics record, texts as a table
//   // destruction: stdin closed, the bridge calls wandb.finish() (offline: the run directory complete)
//
// Start-up is a handshake: the bridge answers "ready" once wandb.init returned, or one line saying why not
// (no wandb package, no such Python), which becomes a UserError naming logging.wandb_python. After that a
// bridge that dies costs the metrics only, never the run: the first failed write is a warning and later
// records are dropped. A resumed run (same out_dir) continues the same W&B run: its id is kept in
// <dir>/wandb/run_id (written to a temporary name and renamed).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "meshtrain/core/config_enums.h"

namespace meshtrain::train {

class WandbWriter {
 public:
  struct Options {
    WandbMode mode = WandbMode::offline;  // offline or online (off: do not construct one)
    std::string project = "meshtrain";
    std::string python = "python3";  // by name on PATH or by path
    std::string dir;                 // the run's directory: W&B writes <dir>/wandb/
    std::string name;                // the run's display name
    nlohmann::json config;           // the resolved config (core/config.h to_json)
  };

  explicit WandbWriter(const Options& options);
  ~WandbWriter();
  WandbWriter(const WandbWriter&) = delete;
  WandbWriter& operator=(const WandbWriter&) = delete;

  // Every number of `record` (a metrics JSONL line; nested keys joined by '/') at its "step", and each
  // (tag, text) as a row of the run's "samples" table.
  void log(const nlohmann::json& record, const std::vector<std::pair<std::string, std::string>>& texts);

  // The W&B run id (kept across resumes).
  const std::string& run_id() const { return run_id_; }

 private:
  bool send(const nlohmann::json& message);
  std::string read_answer();
  // Closes the bridge's input and waits (bounded) for it to finish the run.
  void stop();
  // A bridge that never started a run: ended at once (SIGKILL), nothing to finish.
  void abandon();
  // Closes both ends this process holds (end of input for the bridge).
  void close_pipes();

  std::string run_id_;
  pid_t pid_ = -1;
  int to_bridge_ = -1;    // the bridge's stdin
  int from_bridge_ = -1;  // the handshake's answer
  bool broken_ = false;   // a send failed: later records are dropped
};

}  // namespace meshtrain::train
