#include "meshtrain/train/step_telemetry.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <thread>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace meshtrain::train {
namespace {

// One rank's row of the all-gather; NaN = absent.
enum Slot { kStep, kCompute, kPower, kTemp, kSmClock, kMemClock, kGpuUtil, kMemUtil, kMemUsedMiB, kThrottle, kSlots };
constexpr const char* kGpuKeys[kSlots] = {nullptr,        nullptr,          "power_w",        "temperature_c",
                                          "sm_clock_mhz", "memory_clock_mhz", "gpu_util_pct", "memory_util_pct",
                                          "memory_used_mib", nullptr};
// The three throttle causes, one bit each in the kThrottle slot (exact in a float).
constexpr uint64_t kCauses[] = {hw::throttle::kThermal, hw::throttle::kPowerCap, hw::throttle::kHwSlowdown};

float opt(const std::optional<double>& v) { return v ? static_cast<float>(*v) : std::numeric_limits<float>::quiet_NaN(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::optional<Straggler> find_straggler(const std::vector<double>& seconds, double threshold) {
  if (seconds.size() < 2 || threshold <= 0) return std::nullopt;
  const auto slowest = std::max_element(seconds.begin(), seconds.end());
  Straggler s{static_cast<int>(slowest - seconds.begin()), *slowest, median(seconds)};
  if (s.median <= 0 || s.excess() <= threshold) return std::nullopt;
  return s;
}

StepTelemetry::StepTelemetry(Options o, comm::CommPtr comm, std::unique_ptr<hw::GpuSensors> sensors)
    : o_(std::move(o)), comm_(std::move(comm)), sensors_(std::move(sensors)) {
  if (!o_.gpu_readings || o_.pci_bus_id.empty()) return;
  if (!sensors_) sensors_ = hw::nvml_sensors();
  gpu_index_ = sensors_->index_of(o_.pci_bus_id);
  if (gpu_index_ < 0)
    log::debug("telemetry: no NVML readings for GPU %s (%s)", o_.pci_bus_id.c_str(), sensors_->source().c_str());
}

std::vector<float> StepTelemetry::local_values(double step_s, double compute_s) const {
  std::vector<float> v(kSlots, std::numeric_limits<float>::quiet_NaN());
  v[kStep] = static_cast<float>(step_s);
  v[kCompute] = static_cast<float>(compute_s);
  if (gpu_index_ < 0) return v;
  const hw::GpuReading r = sensors_->read(gpu_index_);
  v[kPower] = opt(r.power_w), v[kTemp] = opt(r.temperature_c), v[kSmClock] = opt(r.sm_clock_mhz);
  v[kMemClock] = opt(r.memory_clock_mhz), v[kGpuUtil] = opt(r.gpu_util_pct), v[kMemUtil] = opt(r.memory_util_pct);
  if (r.memory_used_bytes) v[kMemUsedMiB] = static_cast<float>(static_cast<double>(*r.memory_used_bytes) / (1 << 20));
  if (r.throttle_reasons) {
    int mask = 0;
    for (int c = 0; c < 3; ++c) mask |= (*r.throttle_reasons & kCauses[c]) ? 1 << c : 0;
    v[kThrottle] = static_cast<float>(mask);
  }
  return v;
}

StepTelemetry::Summary StepTelemetry::gather(int64_t step, double step_s, double compute_s) {
  const std::vector<float> mine = local_values(step_s, compute_s);
  at::Tensor all = at::from_blob(const_cast<float*>(mine.data()), {kSlots}, at::kFloat).clone();
  if (comm_ && o_.world_size > 1) {
    auto in = all.to(comm_->device());
    auto out = at::empty({o_.world_size * kSlots}, in.options());
    comm_->all_gather_into(out, in)->wait();
    all = out.cpu();
  }
  const float* v = all.data_ptr<float>();
  const int n = static_cast<int>(all.numel() / kSlots);
  Summary s;
  std::vector<double> steps, computes;
  nlohmann::json gpu = nlohmann::json::object();
  std::map<int, std::pair<double, double>> nodes;  // node → (max temperature, total power)
  for (int r = 0; r < n; ++r) {
    const float* row = v + r * kSlots;
    steps.push_back(row[kStep]);
    computes.push_back(row[kCompute]);
    nlohmann::json g = nlohmann::json::object();
    for (int k = kPower; k < kThrottle; ++k)
      if (!std::isnan(row[k])) g[kGpuKeys[k]] = row[k];
    if (!std::isnan(row[kThrottle])) {
      uint64_t reasons = 0;
      for (int c = 0; c < 3; ++c) reasons |= ((static_cast<int>(row[kThrottle]) >> c) & 1) ? kCauses[c] : 0;
      g["throttled"] = reasons != 0;
      if (reasons) s.warnings.push_back(cat("step ", step, ": rank ", r, "'s GPU is throttling (", hw::throttle::describe(reasons), ")"));
    }
    if (g.empty()) continue;
    gpu[std::to_string(r)] = g;
    auto& node = nodes.try_emplace(r / std::max(1, o_.local_world_size), -1e9, 0.0).first->second;
    if (!std::isnan(row[kTemp])) node.first = std::max(node.first, static_cast<double>(row[kTemp]));
    if (!std::isnan(row[kPower])) node.second += row[kPower];
  }
  s.record["ranks"] = {{"step_time_s", steps}, {"compute_time_s", computes}};
  if (!gpu.empty()) s.record["gpu"] = gpu;
  for (const auto& [node, tp] : nodes) {
    nlohmann::json j = {{"power_w", tp.second}};
    if (tp.first > -1e9) j["max_temperature_c"] = tp.first;
    s.record["nodes"][std::to_string(node)] = j;
    s.console += nodes.size() == 1 ? " | " : (node == nodes.begin()->first ? " | nodes " : ", ");
    s.console += tp.first > -1e9 ? log::sprintf("%.0f°C max, %.0f W", tp.first, tp.second) : log::sprintf("%.0f W", tp.second);
  }
  if (const auto st = find_straggler(computes, o_.straggler_threshold)) {
    s.record["straggler"] = {{"rank", st->rank}, {"compute_time_s", st->seconds}, {"median_s", st->median}};
    s.warnings.push_back(log::sprintf("step %lld: straggler: rank %d computed for %.0f ms, %.0f%% above the median "
                                      "%.0f ms of %d ranks",
                                      static_cast<long long>(step), st->rank, 1000 * st->seconds, 100 * st->excess(),
                                      1000 * st->median, n));
  }
  return s;
}

void slow_rank_delay(int rank) {
  static const std::pair<int, int> kSpec = [] {
    const char* env = std::getenv("MESHTRAIN_SLOW_RANK");
    if (!env || !*env) return std::pair<int, int>{-1, 0};
    const std::string s = env;
    const auto colon = s.find(':');
    MT_USER_CHECK(colon != std::string::npos, "MESHTRAIN_SLOW_RANK: given '", s, "'; valid RANK:MILLISECONDS");
    return std::pair<int, int>{std::stoi(s.substr(0, colon)), std::stoi(s.substr(colon + 1))};
  }();
  if (rank == kSpec.first) std::this_thread::sleep_for(std::chrono::milliseconds(kSpec.second));
}

}  // namespace meshtrain::train
