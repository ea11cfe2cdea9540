// Topology: cliques, the JSON form and the nvidia-smi style matrix; detection is in topology_detect.cpp.
#include "meshtrain/comm/topology.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>

#include "meshtrain/core/error.h"

namespace meshtrain::comm {

namespace {

constexpr const char* kLevelNames[] = {"X", "PIX", "PXB", "PHB", "NODE", "SYS", "?"};

}  // namespace

const char* pcie_level_name(PcieLevel l) { return kLevelNames[static_cast<int>(l)]; }

bool parse_pcie_level(const std::string& s, PcieLevel* out) {
  for (int i = 0; i < 7; ++i) {
    if (s == kLevelNames[i]) {
      *out = static_cast<PcieLevel>(i);
      return true;
    }
  }
  return false;
}

void Topology::check() const {
  const std::size_t n = gpus.size();
  MT_CHECK(nvlinks.size() == n && pcie.size() == n, "topology: matrices have ", nvlinks.size(), " and ", pcie.size(),
           " rows for ", n, " GPUs");
  for (std::size_t i = 0; i < n; ++i) {
    MT_CHECK(nvlinks[i].size() == n && pcie[i].size() == n, "topology: row ", i, " has the wrong length");
    MT_CHECK(nvlinks[i][i] == 0 && pcie[i][i] == PcieLevel::Self, "topology: GPU ", i, " links to itself");
    for (std::size_t j = 0; j < n; ++j) {
      MT_CHECK(nvlinks[i][j] == nvlinks[j][i] && pcie[i][j] == pcie[j][i], "topology: GPUs ", i, " and ", j,
               " are not linked symmetrically");
      MT_CHECK(nvlinks[i][j] >= 0 && (i == j || pcie[i][j] != PcieLevel::Self), "topology: bad link ", i, "-", j);
    }
  }
}

std::vector<std::vector<int>> Topology::nvlink_cliques() const {
  // Bron–Kerbosch without pivoting: a node has at most a few dozen GPUs.
  const int n = num_gpus();
  std::vector<std::vector<int>> out;
  std::function<void(std::vector<int>&, std::vector<int>, std::vector<int>)> bk = [&](std::vector<int>& r,
                                                                                         std::vector<int> p,
                                                                                         std::vector<int> x) {
    if (p.empty() && x.empty()) {
      out.push_back(r);
      return;
    }
    while (!p.empty()) {
      const int v = p.front();
      std::vector<int> p2, x2;
      for (int u : p) {
        if (nvlinked(u, v)) p2.push_back(u);
      }
      for (int u : x) {
        if (nvlinked(u, v)) x2.push_back(u);
      }
      r.push_back(v);
      bk(r, p2, x2);
      r.pop_back();
      p.erase(p.begin());
      x.push_back(v);
    }
  };
  std::vector<int> r, p(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i;
  bk(r, p, {});
  for (auto& c : out) std::sort(c.begin(), c.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.size() != b.size() ? a.size() > b.size() : a < b;
  });
  return out;
}

int Topology::largest_clique() const {
  auto c = nvlink_cliques();
  return c.empty() ? 0 : static_cast<int>(c.front().size());
}

std::vector<int> parse_cpu_list(const std::string& s) {
  std::vector<int> cpus;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) {
    if (part.empty()) continue;
    int a = 0, b = 0;
    char dash = 0, extra = 0;
    std::istringstream ps(part);
    bool ok = static_cast<bool>(ps >> a);
    if (ok && (ps >> dash)) {
      ok = dash == '-' && (ps >> b) && !(ps >> extra) && b >= a;
    } else {
      b = a;
    }
    MT_USER_CHECK(ok && a >= 0, "CPU list '", s, "': '", part, "' is not N or N-M (e.g. 0-15,64-79)");
    for (int c = a; c <= b; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += cat(out.empty() ? "" : ",", cpus[i]);
    if (j > i) out += cat("-", cpus[j]);
    i = j + 1;
  }
  return out;
}

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

std::string format_topology_matrix(const Topology& t) {
  const int n = t.num_gpus();
  std::ostringstream o;
  auto cell = [](const std::string& s) {
    std::string c = s;
    c.resize(std::max<std::size_t>(c.size(), 6), ' ');
    return c;
  };
  o << cell("");
  for (int j = 0; j < n; ++j) o << cell(cat("GPU", j));
  o << cell("NUMA") << "CPU affinity\n";
  for (int i = 0; i < n; ++i) {
    o << cell(cat("GPU", i));
    for (int j = 0; j < n; ++j) {
      const auto ui = static_cast<std::size_t>(i), uj = static_cast<std::size_t>(j);
      o << cell(i == j ? "X" : t.nvlinks[ui][uj] > 0 ? cat("NV", t.nvlinks[ui][uj]) : pcie_level_name(t.pcie[ui][uj]));
    }
    const GpuInfo& g = t.gpus[static_cast<std::size_t>(i)];
    o << cell(g.numa_node >= 0 ? std::to_string(g.numa_node) : "N/A") << (g.cpus.empty() ? "N/A" : format_cpu_list(g.cpus))
      << "\n";
  }
  o << "\nLegend: X = self; NV# = # NVLinks (direct or through NVSwitch); PIX = at most one PCIe bridge;\n"
       "PXB = several PCIe bridges; PHB = through a PCIe host bridge; NODE = across host bridges within a NUMA\n"
       "node; SYS = across the inter-socket link; ? = unknown.\n";
  return o.str();
}

}  // namespace meshtrain::comm
