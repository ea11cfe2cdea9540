// `meshtrain bench ckpt`: checkpoint save/load throughput against the disk's own sequential rates measured
// in the same run and directory. Single process (one rank's file, the per-rank work of a sharded save).
//   disk write   `bytes` in 64 MiB write() calls + fsync (what dd conv=fsync measures)
//   disk read    the same file after posix_fadvise(DONTNEED) drops it from the page cache
//   save         CheckpointManager::save of `tensors` fp32 tensors totalling `bytes`: CRC-32C + write in one
//                pass (CPU tensors straight from the caller's memory; device tensors via pinned host),
//                fsync, meta.json, renames — until committed
//   async save   save_async: the time the caller is blocked (host copy) and the time until committed
//   load         load_into the same layout after dropping the files from the page cache: read_ranges
//                (range_reader.h: 8 MiB preads from 4 threads straight into the tensors), CRC-32C (and the
//                host → device copy with --device cuda); "vs disk" is the ratio to the cold disk read above
//   safetensors read   read_safetensors of the same files, cold: what `meshtrain import` reads
//   phase: …     where a save's time goes, each phase alone on the same tensors: host copy into fresh pages,
//                CRC-32C, write() into the page cache, fsync
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::ckpt {

struct CkptBenchOptions {
  std::string dir;                 // where to write (the disk measured); a fresh subdirectory is used
  uint64_t bytes = 1ull << 30;     // total tensor bytes (≥ 1 GiB for a meaningful figure)
  int tensors = 64;                // how many tensors they are split into
  int repeats = 2;                 // each measurement's best of N
  std::string device = "cpu";      // where the tensors live: cpu | cuda (save copies device → pinned host)
};

struct CkptBenchRow {
  std::string what;
  uint64_t bytes = 0;
  double seconds = 0;
  double gbs = 0;          // GB/s (1e9)
  double vs_disk = 0;      // this rate / the disk's rate in the same direction (0 for the disk rows)
};

std::vector<CkptBenchRow> run_ckpt_bench(const CkptBenchOptions& opts);
std::string ckpt_bench_table(const std::vector<CkptBenchRow>& rows);
std::string ckpt_bench_json(const std::vector<CkptBenchRow>& rows);

}  // namespace meshtrain::ckpt
