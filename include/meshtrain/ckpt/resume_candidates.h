// ResumeCandidates: which checkpoints of a directory `checkpoint.resume: auto` may continue from, newest
// first, and why the others may not — so a damaged or dangling checkpoint never turns into a fresh start
// that overwrites the good ones (docs/checkpoints.md, "Resume").
//
// A step directory (step_N, not *.tmp) is usable when it verifies: meta.json parses and is consistent
// (checkpoint_meta.h checks format, step ≥ 0, dtypes, shard shapes and byte ranges), and every file it
// names exists and is long enough for every byte range it names. Checksums are not read here — that is a
// read of the whole checkpoint; load_into verifies the CRC of every shard it reads, so the trainer checks
// them while loading (the read it needs anyway) and falls back to the next candidate when one fails.
// `latest` is only a hint: it is not trusted (it may dangle, be empty, name a .tmp directory or a path, or be
// gone), and what it says is reported when it disagrees with the newest usable checkpoint.
// Usable is about damage only. Whether a usable checkpoint fits the run (its tensors, shapes, dtypes; a LoRA
// run's rank, base, targets and alpha) is the loader's question: one that does not is IncompatibleCheckpoint
// (checkpoint_reader.h), at which the trainer stops instead of trying an older one it would then overwrite.
#pragma once

#include <string>
#include <vector>

namespace meshtrain::ckpt {

struct SkippedCheckpoint {
  std::string dir;  // a step directory, or the `latest` file
  std::string why;  // one line
};

struct ResumeCandidates {
  std::vector<std::string> usable;        // step directories that verify, newest first
  std::vector<SkippedCheckpoint> skipped;  // those that do not (and a `latest` that misleads), newest first
  // The directory holds some checkpoint, usable or not (a step directory or a `latest` file). When true and
  // `usable` is empty, starting fresh would overwrite them: the caller must refuse.
  bool holds_checkpoints = false;

  // "dir/step_00000004: meta.json missing; latest: names step_00000099, which does not exist" (for errors).
  std::string describe_skipped() const;
};

// "" when the step directory verifies, else why not (one line, naming the file).
std::string verify_checkpoint(const std::string& step_dir);

// Every step directory under `ckpt_dir`, verified, newest step first. A missing `ckpt_dir` holds nothing.
ResumeCandidates find_resume_candidates(const std::string& ckpt_dir);

}  // namespace meshtrain::ckpt
