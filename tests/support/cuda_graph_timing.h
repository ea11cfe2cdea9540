// GPU benches' timing: the median of CUDA-event-timed calls, and a call per index captured in one CUDA graph and
// timed by its replays (the serving engine runs its decode steps as graphs, and a short kernel's eager launch would
// hide it behind the host). For a build with MESHTRAIN_CUDA_KERNELS.
#pragma once

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace meshtrain::testing_support {

// Median of 20 calls timed between CUDA events on the current stream, after 3 warm-up calls; microseconds.
inline double median_event_us(const std::function<void()>& call) {
  for (int i = 0; i < 3; ++i) call();
  std::vector<double> us;
  for (int i = 0; i < 20; ++i) {
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    const auto stream = c10::cuda::getCurrentCUDAStream();
    start.record(stream);
    call();
    stop.record(stream);
    stop.synchronize();
    us.push_back(1e3 * start.elapsed_time(stop));
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// call(0) … call(calls − 1) once each outside the capture (allocations, first launches), then all of them captured
// in one graph on a side stream (as capture needs); the median replay over `calls`, in microseconds.
inline double graph_call_us(const std::function<void(int)>& call, int calls) {
  for (int i = 0; i < calls; ++i) call(i);
  at::cuda::CUDAGraph graph;
  {
    const auto side = c10::cuda::getStreamFromPool();
    const c10::cuda::CUDAStreamGuard guard(side);
    graph.capture_begin();
    for (int i = 0; i < calls; ++i) call(i);
    graph.capture_end();
  }
  return median_event_us([&] { graph.replay(); }) / calls;
}

}  // namespace meshtrain::testing_support
