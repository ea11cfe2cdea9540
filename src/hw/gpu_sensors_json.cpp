#include "meshtrain/hw/gpu_sensors_json.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "meshtrain/core/error.h"

namespace meshtrain::hw {
namespace {

using nlohmann::json;

// One optional field to and from JSON: absent stays absent both ways.
template <typename T>
void put(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

template <typename T>
void get(const json& j, const char* key, std::optional<T>& v, const std::string& where) {
  if (!j.contains(key)) return;
  const json& x = j[key];
  if constexpr (std::is_same_v<T, bool>) {
    MT_USER_CHECK(x.is_boolean(), where, ": key '", key, "' must be true or false");
  } else {
    MT_USER_CHECK(x.is_number(), where, ": key '", key, "' must be a number");
  }
  v = x.get<T>();
}

// The reading's fields in one list, so that writing and reading cannot drift apart.
template <typename J, typename R, typename F>
void reading_fields(J& j, R& r, F&& f) {
  f(j, "power_w", r.power_w), f(j, "temperature_c", r.temperature_c), f(j, "sm_clock_mhz", r.sm_clock_mhz);
  f(j, "memory_clock_mhz", r.memory_clock_mhz), f(j, "gpu_util_pct", r.gpu_util_pct);
  f(j, "memory_util_pct", r.memory_util_pct), f(j, "memory_used_bytes", r.memory_used_bytes);
  f(j, "memory_total_bytes", r.memory_total_bytes), f(j, "throttle_reasons", r.throttle_reasons);
}

template <typename J, typename H, typename F>
void health_fields(J& j, H& h, F&& f) {
  f(j, "ecc_uncorrected_volatile", h.ecc_uncorrected_volatile), f(j, "retired_pages_pending", h.retired_pages_pending);
  f(j, "row_remap_pending", h.row_remap_pending), f(j, "row_remap_failed", h.row_remap_failed);
  f(j, "nvlinks_up", h.nvlinks_up), f(j, "nvlinks_down", h.nvlinks_down), f(j, "pcie_width", h.pcie_width);
  f(j, "pcie_max_width", h.pcie_max_width), f(j, "pcie_gen", h.pcie_gen), f(j, "pcie_max_gen", h.pcie_max_gen);
  f(j, "sm_clock_max_mhz", h.sm_clock_max_mhz), f(j, "power_limit_w", h.power_limit_w);
  f(j, "default_power_limit_w", h.default_power_limit_w), f(j, "slowdown_temperature_c", h.slowdown_temperature_c);
}

class FixtureSensors final : public GpuSensors {
 public:
  FixtureSensors(std::string source, std::vector<GpuHealth> gpus) : source_(std::move(source)), gpus_(std::move(gpus)) {}
  int count() const override { return static_cast<int>(gpus_.size()); }
  int index_of(const std::string& bus_id) const override {
    for (int i = 0; i < count(); ++i)
      if (gpus_[static_cast<size_t>(i)].pci_bus_id == bus_id) return i;
    return -1;
  }
  GpuReading read(int index) const override { return gpus_.at(static_cast<size_t>(index)).now; }
  GpuHealth health(int index) const override { return gpus_.at(static_cast<size_t>(index)); }
  std::string source() const override { return source_; }

 private:
  std::string source_;
  std::vector<GpuHealth> gpus_;
};

}  // namespace

std::string gpu_sensors_to_json(const GpuSensors& sensors) {
  json gpus = json::array();
  auto write = [](json& j, const char* key, const auto& v) { put(j, key, v); };
  for (int i = 0; i < sensors.count(); ++i) {
    const GpuHealth h = sensors.health(i);
    json g = {{"name", h.name}, {"pci_bus_id", h.pci_bus_id}};
    health_fields(g, h, write);
    json now = json::object();
    reading_fields(now, h.now, write);
    g["now"] = now;
    gpus.push_back(g);
  }
  return json({{"source", sensors.source()}, {"gpus", gpus}}).dump(2) + "\n";
}

std::unique_ptr<GpuSensors> gpu_sensors_from_json(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw UserError(cat(name, ": not valid JSON: ", e.what()));
  }
  MT_USER_CHECK(j.is_object() && j.contains("gpus") && j["gpus"].is_array(), name,
                ": key 'gpus' must be an array of GPU objects");
  std::vector<GpuHealth> gpus;
  for (const json& g : j["gpus"]) {
    const std::string where = cat(name, ": gpus[", gpus.size(), "]");
    MT_USER_CHECK(g.is_object() && g.contains("name") && g["name"].is_string(), where, ": key 'name' must be a string");
    GpuHealth h;
    h.name = g["name"];
    if (g.contains("pci_bus_id") && g["pci_bus_id"].is_string()) h.pci_bus_id = g["pci_bus_id"];
    auto read = [&where](const json& o, const char* key, auto& v) { get(o, key, v, where); };
    health_fields(g, h, read);
    if (g.contains("now")) reading_fields(g["now"], h.now, read);
    gpus.push_back(std::move(h));
  }
  return std::make_unique<FixtureSensors>(cat("fixture ", name), std::move(gpus));
}

std::unique_ptr<GpuSensors> load_gpu_sensors(const std::string& path) {
  std::ifstream in(path);
  MT_USER_CHECK(in, "cannot read GPU readings file '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return gpu_sensors_from_json(ss.str(), path);
}

}  // namespace meshtrain::hw
