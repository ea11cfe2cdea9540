// read_ranges: many byte ranges of many files into the caller's memory at the disk's sequential rate — the
// one read path of checkpoint loads (checkpoint_reader.h) and Hugging Face imports (hf_files.h).
//
// Why not one pread per tensor: a single thread alternates between waiting for the disk and touching memory
// (page faults on fresh destination pages, the checksum), so the disk idles half the time; a 4 GiB load ran at
// 63 % of the disk's cold sequential rate that way. Here each range is cut into `chunk_bytes` pieces (several
// MiB: large requests, few syscalls), and `threads` workers take the pieces in file order, so the disk always
// has a few large sequential requests queued while other workers fault pages and checksum what has arrived.
// Each piece's CRC is computed by the worker that read it, while the bytes are hot, and the pieces' CRCs are
// combined per range (crc32c_combine). Bytes land straight in `dest` (no staging copy).
//
// O_DIRECT (`direct`, off by default) bypasses the page cache for pieces whose offset, length and
// destination are 4 KiB aligned; the rest of such a range is read buffered.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/progress_meter.h"

namespace meshtrain::ckpt {

struct ReadRange {
  std::string path;        // the file
  uint64_t offset = 0;     // absolute byte offset in it
  uint64_t length = 0;
  void* dest = nullptr;    // `length` writable bytes
  std::string what;        // the tensor it holds, for error messages
  enum class Checksum { none, crc32, crc32c } checksum = Checksum::none;
  uint32_t crc = 0;        // out: the checksum of the bytes read (checksum != none)
};

struct ReadOptions {
  uint64_t chunk_bytes = 8ull << 20;  // one pread's size
  int threads = 4;                    // concurrent preads (0: from MESHTRAIN_READ_THREADS, else 4)
  bool direct = false;                // O_DIRECT for aligned pieces (MESHTRAIN_READ_DIRECT=1 sets it)
  ProgressMeter* progress = nullptr;  // bytes are added as pieces arrive; the caller owns start and finish

  // Defaults with the environment's overrides applied.
  static ReadOptions from_env();
};

struct ReadStats {
  uint64_t bytes = 0;
  uint64_t preads = 0;
};

// Fills every range's `dest` and `crc`. UserError naming the file and the tensor for a file that cannot be
// opened or ends before a range does.
ReadStats read_ranges(std::vector<ReadRange>& ranges, const ReadOptions& opts = ReadOptions::from_env());

}  // namespace meshtrain::ckpt
