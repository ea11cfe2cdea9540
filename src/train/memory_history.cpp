#include "meshtrain/train/memory_history.h"

#include <torch/cuda.h>

#ifdef MESHTRAIN_WITH_CUDA
#include <torch/csrc/cuda/memory_snapshot.h>
#endif

#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"

namespace meshtrain::train {

MemoryHistory::MemoryHistory(const std::string& what, int64_t max_entries) {
  MT_USER_CHECK(max_entries > 0, what, ": the events kept must be > 0, got ", max_entries);
#ifdef MESHTRAIN_WITH_CUDA
  MT_USER_CHECK(torch::cuda::is_available(), what, ": records the CUDA caching allocator, and no GPU is visible");
  // The C++ stacks name the op behind each block; there are no Python frames to record.
  torch::cuda::_record_memory_history(/*enabled=*/true, /*record_context=*/true, max_entries,
                                      /*trace_alloc_record_context=*/true, /*record_cpp_context=*/true);
#else
  MT_USER_CHECK(false, what, ": records the CUDA caching allocator, and this build has no CUDA");
#endif
}

MemoryHistory::~MemoryHistory() {
#ifdef MESHTRAIN_WITH_CUDA
  try {
    torch::cuda::_record_memory_history(/*enabled=*/false);
  } catch (...) {  // a destructor: the recording stops with the process anyway
  }
#endif
}

int64_t MemoryHistory::write(const std::string& path) const {
#ifdef MESHTRAIN_WITH_CUDA
  const std::string snapshot = torch::cuda::_memory_snapshot_pickled();
  write_file_atomic(path, snapshot);
  return static_cast<int64_t>(snapshot.size());
#else
  (void)path;
  return 0;
#endif
}

}  // namespace meshtrain::train
