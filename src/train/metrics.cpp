#include "meshtrain/train/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

#ifdef MESHTRAIN_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace meshtrain::train {

namespace {

double wall_clock_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The resolved config as "section.key" → value, the hyperparameters TensorBoard's HParams tab lists.
std::vector<std::pair<std::string, nlohmann::json>> config_hparams(const nlohmann::json& config) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  for (auto section = config.begin(); section != config.end(); ++section) {
    if (!section.value().is_object()) continue;
    for (auto key = section.value().begin(); key != section.value().end(); ++key)
      out.emplace_back(section.key() + "." + key.key(), key.value());
  }
  return out;
}

// The YAML as a Markdown code block (indented four spaces) for TensorBoard's text tab.
std::string markdown_code(const std::string& text) {
  std::string out = "    ";
  for (char c : text) {
    out.push_back(c);
    if (c == '\n') out += "    ";
  }
  return out;
}

}  // namespace

MetricsLog::MetricsLog(const Config& cfg, int rank, bool append) : path_(cfg.logging.metrics) {
  if (rank != 0) return;
  const nlohmann::json config = nlohmann::json::parse(to_json(cfg));
  if (!cfg.logging.tensorboard.empty()) {
    tensorboard_ = std::make_unique<TensorBoardWriter>(cfg.logging.tensorboard, "logging.tensorboard");
    const double now = wall_clock_now();
    tensorboard_->add_hparams(config_hparams(config), now);
    tensorboard_->add_text(0, "config", markdown_code(to_yaml(cfg)), now);
  }
  if (cfg.logging.wandb != WandbMode::off)
    wandb_ = std::make_unique<WandbWriter>(WandbWriter::Options{
        .mode = cfg.logging.wandb, .project = cfg.logging.wandb_project, .python = cfg.logging.wandb_python,
        .dir = cfg.train.out_dir, .name = std::filesystem::path(cfg.train.out_dir).filename().string(),
        .config = config});
  if (path_.empty()) return;
  auto parent = std::filesystem::path(path_).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  f_ = std::fopen(path_.c_str(), append ? "a" : "w");
  MT_USER_CHECK(f_, "logging.metrics: cannot open '", path_, "' for writing: ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::json& record, const std::vector<std::pair<std::string, std::string>>& texts) {
  if (wandb_) wandb_->log(record, texts);
  if (tensorboard_) {
    const double now = wall_clock_now();
    tensorboard_->add_record(record, now);
    for (const auto& [tag, text] : texts) tensorboard_->add_text(record.value("step", int64_t{0}), tag, text, now);
  }
  if (!f_) return;
  // Invalid UTF-8 (a byte-level model's sample cut inside a character) becomes U+FFFD, never an exception.
  const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

double device_peak_flops(bool cuda, int device_index) {
#ifdef MESHTRAIN_WITH_CUDA
  if (cuda) {
    const std::string name = at::cuda::getDeviceProperties(device_index)->name;
    // Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's data sheets (SXM parts).
    if (name.find("H200") != std::string::npos || name.find("H100") != std::string::npos) return 989e12;
    if (name.find("A100") != std::string::npos) return 312e12;
    if (name.find("B200") != std::string::npos) return 2250e12;
    if (name.find("L40S") != std::string::npos) return 362e12;
    return 0;
  }
#endif
  return 0;
}

int64_t peak_memory_bytes(bool cuda, int device_index) {
#ifdef MESHTRAIN_WITH_CUDA
  if (cuda) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device_index));
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#endif
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

void reset_peak_memory(bool cuda, int device_index) {
#ifdef MESHTRAIN_WITH_CUDA
  if (cuda) c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device_index));
#else
  (void)cuda;
  (void)device_index;
#endif
}

int64_t device_memory_bytes(bool cuda, int device_index) {
#ifdef MESHTRAIN_WITH_CUDA
  if (cuda) return static_cast<int64_t>(at::cuda::getDeviceProperties(device_index)->totalGlobalMem);
#endif
  return static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
}

std::string format_duration(double s) {
  if (s < 0 || s != s) return "?";
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) return log::sprintf("%ldh%02ldm", t / 3600, (t % 3600) / 60);
  if (t >= 60) return log::sprintf("%ldm%02lds", t / 60, t % 60);
  return log::sprintf("%lds", t);
}

}  // namespace meshtrain::train
