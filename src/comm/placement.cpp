// Placement of local ranks on GPUs; see placement.h.
#include "meshtrain/comm/placement.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "meshtrain/core/error.h"

namespace meshtrain::comm {

namespace {

constexpr long kNotNvlink = 1000;           // a pair outside NVLink costs more than any NVLink group
constexpr long kSearchBudget = 2'000'000;   // DFS nodes before settling for the best found

long pair_cost(const hw::Topology& t, int a, int b) {
  if (t.nvlinked(a, b)) return 0;
  const hw::PcieLevel l = t.pcie[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)];
  return kNotNvlink + (l == hw::PcieLevel::Unknown ? 6 : static_cast<long>(l));
}

std::string join(const std::vector<int>& v, const char* sep = ",") {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += cat(i ? sep : "", v[i]);
  return s;
}

std::string clique_list(const hw::Topology& t) {
  std::string s;
  for (const auto& c : t.nvlink_cliques()) s += cat(s.empty() ? "" : "; ", "{", join(c), "}");
  return s;
}

// Branch and bound over disjoint GPU sets, group by group.
class Search {
 public:
  Search(const hw::Topology& t, std::vector<int> sizes) : t_(t), sizes_(std::move(sizes)) {
    used_.assign(static_cast<std::size_t>(t.num_gpus()), false);
  }

  std::vector<std::vector<int>> run() {
    cur_.assign(sizes_.size(), {});
    dfs(0, 0, -1);
    return best_;
  }
  long best_cost() const { return best_cost_; }

 private:
  // Group k gets GPUs chosen in ascending order; groups of equal size start at increasing GPUs (they are
  // interchangeable, so other orders only repeat assignments already tried).
  void dfs(std::size_t k, long cost, int prev_first) {
    if (++nodes_ > kSearchBudget && !best_.empty()) return;
    if (cost >= best_cost_) return;
    if (k == sizes_.size()) {
      best_cost_ = cost;
      best_ = cur_;
      return;
    }
    const bool same_as_prev = k > 0 && sizes_[k] == sizes_[k - 1];
    fill(k, cost, same_as_prev ? prev_first + 1 : 0);
  }

  void fill(std::size_t k, long cost, int from) {
    auto& g = cur_[k];
    if (static_cast<int>(g.size()) == sizes_[k]) {
      dfs(k + 1, cost, g.front());
      return;
    }
    for (int gpu = from; gpu < t_.num_gpus(); ++gpu) {
      if (used_[static_cast<std::size_t>(gpu)]) continue;
      long add = 0;
      for (int m : g) add += pair_cost(t_, m, gpu);
      if (cost + add >= best_cost_) continue;
      used_[static_cast<std::size_t>(gpu)] = true;
      g.push_back(gpu);
      fill(k, cost + add, gpu + 1);
      g.pop_back();
      used_[static_cast<std::size_t>(gpu)] = false;
      if (nodes_ > kSearchBudget && !best_.empty()) return;
    }
  }

  const hw::Topology& t_;
  std::vector<int> sizes_;
  std::vector<bool> used_;
  std::vector<std::vector<int>> cur_, best_;
  long best_cost_ = std::numeric_limits<long>::max();
  long nodes_ = 0;
};

}  // namespace

std::string Placement::describe(const hw::Topology& topo) const {
  std::string s;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    std::vector<int> gpus;
    for (int r : groups[k]) gpus.push_back(gpu_of_local_rank[static_cast<std::size_t>(r)]);
    bool nv = true;
    int min_links = std::numeric_limits<int>::max();
    for (int a : gpus) {
      for (int b : gpus) {
        if (a == b || topo.num_gpus() == 0) continue;
        nv = nv && topo.nvlinked(a, b);
        min_links = std::min(min_links, topo.nvlinks[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)]);
      }
    }
    const std::string link = gpus.size() < 2 || topo.num_gpus() == 0 ? "" : nv ? cat(" (NVLink, NV", min_links, ")") : " (not all NVLink: PCIe)";
    s += cat("group ", k, ": local ranks ", join(groups[k]), " → GPUs ", join(gpus), link, "\n");
  }
  if (!note.empty()) s += note + "\n";
  return s;
}

std::vector<std::vector<int>> local_groups(const MeshShape& shape, DimSet dims, int local_world_size, int node,
                                           bool* spans_nodes) {
  MT_USER_CHECK(local_world_size >= 1 && shape.world_size() % local_world_size == 0, "local world size ",
                local_world_size, " does not divide the world size ", shape.world_size());
  const int first = node * local_world_size;
  MT_USER_CHECK(node >= 0 && first < shape.world_size(), "node ", node, " is outside a world of ", shape.world_size(),
                " ranks with ", local_world_size, " per node");
  std::vector<std::vector<int>> out;
  std::vector<bool> seen(static_cast<std::size_t>(local_world_size), false);
  if (spans_nodes) *spans_nodes = false;
  for (int lr = 0; lr < local_world_size; ++lr) {
    if (seen[static_cast<std::size_t>(lr)]) continue;
    std::vector<int> g;
    for (int r : shape.group(first + lr, dims)) {
      if (r >= first && r < first + local_world_size) {
        g.push_back(r - first);
        seen[static_cast<std::size_t>(r - first)] = true;
      } else if (spans_nodes) {
        *spans_nodes = true;
      }
    }
    std::sort(g.begin(), g.end());
    out.push_back(std::move(g));
  }
  return out;
}

Placement place_groups(const hw::Topology& topo, const std::vector<std::vector<int>>& groups, int local_world_size,
                       bool allow_slow, const std::string& what) {
  Placement p;
  p.groups = groups;
  p.gpu_of_local_rank.resize(static_cast<std::size_t>(local_world_size));
  std::iota(p.gpu_of_local_rank.begin(), p.gpu_of_local_rank.end(), 0);
  if (topo.num_gpus() == 0) {
    p.groups_on_nvlink = false;
    p.note = cat("no GPUs (", topo.source, "): local rank i keeps device i");
    return p;
  }
  MT_USER_CHECK(local_world_size <= topo.num_gpus(), local_world_size, " local ranks but this node has ",
                topo.num_gpus(), " GPUs (", topo.source, "): lower --nproc-per-node");
  std::vector<int> sizes;
  for (const auto& g : groups) sizes.push_back(static_cast<int>(g.size()));
  // Largest groups first so that they get first pick of the big cliques; results map back by index.
  std::vector<std::size_t> by_size(groups.size());
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(), [&](auto a, auto b) { return sizes[a] > sizes[b]; });
  std::vector<int> sorted_sizes;
  for (auto i : by_size) sorted_sizes.push_back(sizes[i]);
  Search search(topo, sorted_sizes);
  const auto gpu_sets = search.run();
  MT_CHECK(gpu_sets.size() == groups.size(), "placement search found nothing");
  for (std::size_t k = 0; k < by_size.size(); ++k) {
    const auto& ranks = groups[by_size[k]];
    for (std::size_t m = 0; m < ranks.size(); ++m)
      p.gpu_of_local_rank[static_cast<std::size_t>(ranks[m])] = gpu_sets[k][m];
  }
  p.groups_on_nvlink = search.best_cost() < kNotNvlink;
  if (!p.groups_on_nvlink) {
    const int biggest = *std::max_element(sizes.begin(), sizes.end());
    const std::string why =
        cat(what, ": cannot place ", groups.size(), " group(s) of ", biggest, " GPUs each inside NVLink cliques on this "
            "node: the largest NVLink clique has ", topo.largest_clique(), " GPU(s) (cliques ", clique_list(topo), "; ",
            topo.source, ")");
    MT_USER_CHECK(allow_slow, why, "; lower parallel.tp or set parallel.allow_slow_tp: true to run it over PCIe");
    p.note = cat(why, "; proceeding over PCIe (parallel.allow_slow_tp)");
  }
  return p;
}

Placement place_tp(const hw::Topology& topo, const MeshShape& shape, int local_world_size, int node, bool allow_slow_tp) {
  bool spans = false;
  auto groups = local_groups(shape, Dim::tp, local_world_size, node, &spans);
  const std::string what = cat("parallel.tp = ", shape.size(Dim::tp));
  if (spans) {
    const std::string why = cat(what, ": tensor-parallel groups span nodes (", local_world_size,
                                " ranks per node, order ", shape.order_string(), "), so they cannot use NVLink");
    MT_USER_CHECK(allow_slow_tp, why, "; use tp ≤ ", local_world_size,
                  " with tp innermost in parallel.order, or set parallel.allow_slow_tp: true");
    Placement p = place_groups(topo, groups, local_world_size, true, what);
    p.groups_on_nvlink = false;
    p.note = cat(why, "; proceeding (parallel.allow_slow_tp)", p.note.empty() ? "" : "; ", p.note);
    return p;
  }
  return place_groups(topo, groups, local_world_size, allow_slow_tp, what);
}

}  // namespace meshtrain::comm
