// The CUDA caching allocator's history over a run, for finding what makes a peak: every allocation and free
// from the moment it is made, with the C++ stack that asked for it, saved as the snapshot PyTorch's memory
// viewer reads (pytorch.org/memory_viz: the timeline of live tensors, the peak and who holds what there).
// `meshtrain bench train --memory-snapshot FILE` (docs/profiling.md "Memory").
#pragma once

#include <cstdint>
#include <string>

namespace meshtrain::train {

class MemoryHistory {
 public:
  // Starts recording, keeping the last `max_entries` allocator events. Throws UserError where there is no CUDA
  // build or device (`what` names the flag in that line).
  MemoryHistory(const std::string& what, int64_t max_entries);
  ~MemoryHistory();  // stops recording
  MemoryHistory(const MemoryHistory&) = delete;
  MemoryHistory& operator=(const MemoryHistory&) = delete;

  // The snapshot (PyTorch's pickled format) to `path`, whole or not at all; returns its size in bytes.
  int64_t write(const std::string& path) const;
};

}  // namespace meshtrain::train
