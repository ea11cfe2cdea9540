// Topology: the consistency check and NVLink cliques.
#include "meshtrain/hw/topology.h"

#include <algorithm>
#include <functional>

#include "meshtrain/core/error.h"

namespace meshtrain::hw {

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

}  // namespace meshtrain::hw
