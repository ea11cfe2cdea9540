// The launcher's scratch directory for error files (and --redirects/--tee files) when there is no --log-dir:
// $TMPDIR/meshrun-XXXXXX (else /tmp), holding a `.owner` file with meshrun's pid and start time.
//
// A launcher that exits normally removes it, except what its summary pointed at (keep()): that must outlive
// meshrun. A SIGKILLed launcher cannot clean up, so every launcher first sweeps the scratch directories of
// this user whose owner process is gone (pid no longer running, or reused by a process started later).
// Directories without `.owner` (the kept ones) are never swept.
#pragma once

#include <string>
#include <vector>

namespace meshtrain::launch {

class ScratchDir {
 public:
  // Sweeps stale scratch directories under `parent` ("" = $TMPDIR, else /tmp), then creates this one.
  explicit ScratchDir(const std::string& parent = "");
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir();  // removes everything not kept

  const std::string& path() const { return path_; }
  void keep_all();                      // logs were written here: leave the whole directory
  void keep(const std::string& file);  // a file under path() that must outlive meshrun

 private:
  void prune() const;  // removes everything but the kept files (and their parent directories)
  std::string path_;
  bool keep_all_ = false;
  std::vector<std::string> kept_;
};

// Removes <parent>/meshrun-* directories owned by this user whose `.owner` process is gone. Returns the
// number removed. Never throws (a directory that cannot be removed is left for the next launcher).
int sweep_stale_scratch(const std::string& parent);

// $TMPDIR when set to a writable directory, else /tmp.
std::string scratch_parent();

// Where the workers' in-memory checkpoints go: $MESHRUN_HOST_MEMORY_DIR (worker_env.h), else /dev/shm (the node's
// memory), else scratch_parent() where neither is a writable directory.
std::string host_memory_parent();

}  // namespace meshtrain::launch
