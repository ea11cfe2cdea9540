#include "meshtrain/hw/topology_json.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/hw/cpu_list.h"

namespace meshtrain::hw {

Topology topology_from_json(const std::string& text, const std::string& name) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw UserError(cat(name, ": not valid JSON: ", e.what()));
  }
  auto need = [&](const nlohmann::json& obj, const char* key, auto pred, const char* what) -> const nlohmann::json& {
    MT_USER_CHECK(obj.is_object() && obj.contains(key) && pred(obj[key]), name, ": key '", key, "' must be ", what);
    return obj[key];
  };
  Topology t;
  t.source = "fixture " + name;
  if (j.is_object() && j.contains("system")) t.system = need(j, "system", [](auto& v) { return v.is_string(); }, "a string");
  const auto& gpus = need(j, "gpus", [](auto& v) { return v.is_array(); }, "an array of GPU objects");
  for (const auto& g : gpus) {
    GpuInfo info;
    info.name = need(g, "name", [](auto& v) { return v.is_string(); }, "a string (in gpus[])");
    if (g.contains("pci_bus_id")) info.pci_bus_id = need(g, "pci_bus_id", [](auto& v) { return v.is_string(); }, "a string");
    if (g.contains("numa_node")) info.numa_node = need(g, "numa_node", [](auto& v) { return v.is_number_integer(); }, "an integer");
    if (g.contains("cpus")) info.cpus = parse_cpu_list(need(g, "cpus", [](auto& v) { return v.is_string(); }, "a CPU list string like \"0-15,64-79\""));
    if (g.contains("nvswitch_links"))
      info.nvswitch_links = need(g, "nvswitch_links", [](auto& v) { return v.is_number_integer(); }, "an integer");
    t.gpus.push_back(std::move(info));
  }
  const std::size_t n = t.gpus.size();
  const auto& nv = need(j, "nvlink", [n](auto& v) { return v.is_array() && v.size() == n; },
                        "an array with one row of NVLink counts per GPU");
  const auto& pc = need(j, "pcie", [n](auto& v) { return v.is_array() && v.size() == n; },
                        "an array with one row per GPU of PCIe levels (X, PIX, PXB, PHB, NODE, SYS)");
  for (std::size_t i = 0; i < n; ++i) {
    MT_USER_CHECK(nv[i].is_array() && nv[i].size() == n && pc[i].is_array() && pc[i].size() == n, name,
                  ": nvlink/pcie row ", i, " must have ", n, " entries");
    std::vector<int> nrow;
    std::vector<PcieLevel> prow;
    for (std::size_t k = 0; k < n; ++k) {
      MT_USER_CHECK(nv[i][k].is_number_integer() && nv[i][k].get<int>() >= 0, name, ": nvlink[", i, "][", k,
                    "] must be an integer ≥ 0");
      nrow.push_back(nv[i][k].get<int>());
      PcieLevel l{};
      MT_USER_CHECK(pc[i][k].is_string() && parse_pcie_level(pc[i][k].get<std::string>(), &l), name, ": pcie[", i,
                    "][", k, "] must be one of X, PIX, PXB, PHB, NODE, SYS, ?");
      prow.push_back(l);
    }
    t.nvlinks.push_back(std::move(nrow));
    t.pcie.push_back(std::move(prow));
  }
  try {
    t.check();
  } catch (const Error& e) {
    throw UserError(cat(name, ": ", e.what()));
  }
  return t;
}

std::string topology_to_json(const Topology& t) {
  // Hand-formatted so that each matrix row stays on one line (fixtures are read by people too).
  auto q = [](const std::string& s) { return nlohmann::json(s).dump(); };
  std::ostringstream o;
  o << "{\n  \"system\": " << q(t.system) << ",\n  \"source\": " << q(t.source) << ",\n  \"gpus\": [\n";
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    const GpuInfo& g = t.gpus[i];
    o << "    {\"name\": " << q(g.name) << ", \"pci_bus_id\": " << q(g.pci_bus_id) << ", \"numa_node\": " << g.numa_node
      << ", \"cpus\": " << q(format_cpu_list(g.cpus)) << ", \"nvswitch_links\": " << g.nvswitch_links << "}"
      << (i + 1 < t.gpus.size() ? ",\n" : "\n");
  }
  o << "  ],\n  \"nvlink\": [\n";
  for (std::size_t i = 0; i < t.nvlinks.size(); ++i) {
    o << "    [";
    for (std::size_t k = 0; k < t.nvlinks[i].size(); ++k) o << (k ? ", " : "") << t.nvlinks[i][k];
    o << "]" << (i + 1 < t.nvlinks.size() ? ",\n" : "\n");
  }
  o << "  ],\n  \"pcie\": [\n";
  for (std::size_t i = 0; i < t.pcie.size(); ++i) {
    o << "    [";
    for (std::size_t k = 0; k < t.pcie[i].size(); ++k) o << (k ? ", " : "") << q(pcie_level_name(t.pcie[i][k]));
    o << "]" << (i + 1 < t.pcie.size() ? ",\n" : "\n");
  }
  o << "  ]\n}\n";
  return o.str();
}

Topology load_topology(const std::string& path) {
  std::ifstream in(path);
  MT_USER_CHECK(in, "topology file '", path, "' cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return topology_from_json(ss.str(), path);
}

void save_topology(const Topology& t, const std::string& path) {
  std::ofstream out(path);
  out << topology_to_json(t);
  MT_USER_CHECK(out.good(), "cannot write topology to '", path, "'");
}

}  // namespace meshtrain::hw
