#include "meshtrain/train/step_profiler.h"

#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <filesystem>
#include <set>

#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/log.h"

namespace meshtrain::train {
namespace {

namespace prof = torch::profiler::impl;
namespace kineto = torch::autograd::profiler;

std::set<prof::ActivityType> activities(bool cuda) {
  if (cuda) return {prof::ActivityType::CPU, prof::ActivityType::CUDA};
  return {prof::ActivityType::CPU};
}

prof::ProfilerConfig profiler_config() { return prof::ProfilerConfig(prof::ProfilerState::KINETO); }

std::vector<ProfileEvent> copy_events(const kineto::ProfilerResult& result) {
  std::vector<ProfileEvent> out;
  out.reserve(result.events().size());
  for (const auto& e : result.events()) {
    // On CUDA each user scope ("meshtrain::step") is mirrored on the device timeline; it is a span, not
    // device work, and counting it would count the step twice.
    if (e.activityType() == static_cast<uint8_t>(libkineto::ActivityType::GPU_USER_ANNOTATION)) continue;
    const bool device = e.deviceType() != c10::DeviceType::CPU;
    // A device event carries the id of the CPU op that launched it as its linked correlation id.
    out.push_back({.name = e.name(), .on_device = device, .thread = e.startThreadId(),
                   .start_ns = static_cast<int64_t>(e.startNs()), .end_ns = static_cast<int64_t>(e.endNs()),
                   .correlation = device ? e.linkedCorrelationId() : e.correlationId()});
  }
  return out;
}

}  // namespace

StepProfiler::StepProfiler(int64_t first_step, int64_t count, std::string dir, int rank, bool cuda, int device_index)
    : first_(first_step), count_(count), dir_(std::move(dir)), rank_(rank), cuda_(cuda), device_index_(device_index) {
  if (count_ > 0) kineto::prepareProfiler(profiler_config(), activities(cuda_));
}

StepProfiler::~StepProfiler() {
  if (recording_) kineto::disableProfiler();  // an exception left the profiled steps: drop the recording
}

void StepProfiler::before_step(int64_t step) {
  if (count_ <= 0 || step != first_ || recording_) return;
  if (cuda_) torch::cuda::synchronize(device_index_);  // earlier steps' kernels stay out of the window
  kineto::enableProfiler(profiler_config(), activities(cuda_));
  recording_ = true;
}

std::optional<ProfileSummary> StepProfiler::after_step(int64_t step) {
  if (!recording_ || step != first_ + count_ - 1) return std::nullopt;
  if (cuda_) torch::cuda::synchronize(device_index_);
  auto result = kineto::disableProfiler();
  recording_ = false;
  MT_CHECK(result != nullptr, "the profiler returned no result");
  std::filesystem::create_directories(dir_);
  const std::string base = dir_ + "/rank_" + std::to_string(rank_);
  // ProfilerResult::save writes the file itself; the rename makes it appear whole.
  result->save(base + ".trace.json.tmp");
  std::filesystem::rename(base + ".trace.json.tmp", base + ".trace.json");
  ProfileSummary summary = summarize_profile(copy_events(*result));
  write_file_atomic(base + ".summary.json", profile_json(summary) + "\n");
  return summary;
}

StepScope::StepScope(const char* name) : fn_(at::RecordScope::USER_SCOPE) {
  if (fn_.isActive()) fn_.before(name, c10::ArrayRef<const c10::IValue>{});
}

}  // namespace meshtrain::train
