// meshtrain topo [CONFIG]: this node's GPU link matrix, NUMA/CPU affinity, NVLink cliques and the rank placement
// a run would use (or a fixture's, with --fixture).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli.h"
#include "commands.h"
#include "meshtrain/comm/placement.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/error.h"
#include "meshtrain/hw/cpu_list.h"
#include "meshtrain/hw/topology_detect.h"
#include "meshtrain/hw/topology_json.h"
#include "meshtrain/hw/topology_matrix.h"

namespace meshtrain::cli {
namespace {

struct TopoRequest {
  Config cfg;
  int nproc = 1, nnodes = 1, node = 0;
};

TopoRequest topo_request(const cxxopts::ParseResult& r, const hw::Topology& topo) {
  TopoRequest q;
  const auto configs = strings(r, "config");
  MT_USER_CHECK(configs.size() <= 1, "meshtrain topo: at most one CONFIG file, got ", configs.size());
  if (!configs.empty()) q.cfg = load_config(configs[0], strings(r, "set"));
  if (r.count("tp")) q.cfg.parallel.tp = r["tp"].as<int>();
  if (r.count("allow-slow-tp")) q.cfg.parallel.allow_slow_tp = true;
  const auto env_local = comm::env_int(comm::process_env(), "LOCAL_WORLD_SIZE");
  q.nproc = r.count("nproc") ? r["nproc"].as<int>()
            : env_local      ? static_cast<int>(*env_local)
                             : std::max(1, topo.num_gpus());
  q.nnodes = r["nnodes"].as<int>();
  MT_USER_CHECK(q.nproc >= 1 && q.nnodes >= 1, "meshtrain topo: --nproc and --nnodes must be ≥ 1");
  q.node = r["node"].as<int>();
  MT_USER_CHECK(q.node >= 0 && q.node < q.nnodes, "meshtrain topo: --node ", q.node, " is not in [0, ", q.nnodes, ")");
  return q;
}

// The matrix and cliques, printed before placing so that they stay visible above a placement error.
void print_topology(const hw::Topology& topo, const MeshShape& shape, const TopoRequest& q) {
  std::printf("%s  [%s]\n\n%s\n", topo.system.c_str(), topo.source.c_str(), hw::format_topology_matrix(topo).c_str());
  std::string cliques;
  for (const auto& c : topo.nvlink_cliques()) {
    std::string g;
    for (int i : c) g += cat(g.empty() ? "" : ",", i);
    cliques += cat(cliques.empty() ? "" : " ", "{", g, "}");
  }
  std::printf("NVLink cliques: %s (largest: %d GPUs)\n\n", cliques.c_str(), topo.largest_clique());
  std::printf("Placement for mesh %s, %d local rank(s) on node %d of %d:\n", shape.describe().c_str(), q.nproc, q.node,
              q.nnodes);
  std::fflush(stdout);
}

void print_placement(const hw::Topology& topo, const comm::Placement& p, int nproc) {
  std::printf("%s", p.describe(topo).c_str());
  for (int lr = 0; lr < nproc; ++lr) {
    const int gpu = p.gpu_of_local_rank[static_cast<std::size_t>(lr)];
    const auto& g = topo.gpus[static_cast<std::size_t>(gpu)];
    std::printf("local rank %d → GPU %d (%s), NUMA %d, CPUs %s\n", lr, gpu, g.pci_bus_id.c_str(), g.numa_node,
                g.cpus.empty() ? "N/A" : hw::format_cpu_list(g.cpus).c_str());
  }
}

nlohmann::json placement_json(const hw::Topology& topo, const MeshShape& shape, const comm::Placement& p) {
  return {{"topology", nlohmann::json::parse(hw::topology_to_json(topo))},
          {"placement",
           {{"mesh", shape.describe()},
            {"gpu_of_local_rank", p.gpu_of_local_rank},
            {"tp_groups", p.groups},
            {"tp_on_nvlink", p.groups_on_nvlink},
            {"note", p.note}}}};
}

}  // namespace

int cmd_topo(int argc, char** argv) {
  cxxopts::Options o("meshtrain topo",
                     "Print this node's GPU link matrix (nvidia-smi topo style), NUMA and CPU affinity, the NVLink "
                     "cliques, and the local-rank → GPU placement a run would use: every tensor-parallel group "
                     "inside an NVLink clique, data-parallel across. Works without GPUs (then only a --fixture "
                     "has something to show).");
  o.add_options()("fixture", "read the topology from a JSON file (tests/fixtures/topology/*.json) instead of NVML",
                  cxxopts::value<std::string>())(
      "tp", "tensor-parallel size (default: the config's parallel.tp, else 1)", cxxopts::value<int>())(
      "nproc", "local ranks on the node (default: LOCAL_WORLD_SIZE, else the number of GPUs)", cxxopts::value<int>())(
      "nnodes", "nodes in the job (world size = nnodes × nproc)", cxxopts::value<int>()->default_value("1"))(
      "node", "which node to place (0 … nnodes-1)", cxxopts::value<int>()->default_value("0"))(
      "allow-slow-tp", "place tp groups over PCIe when no NVLink clique fits (parallel.allow_slow_tp)")(
      "set", "override a config value: section.key=value (repeatable)", cxxopts::value<std::vector<std::string>>())(
      "json", "print the topology and placement as JSON")(
      "save", "also write the topology as a JSON fixture to FILE", cxxopts::value<std::string>())(
      "h,help", "show this help")("config", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"config"});
  o.positional_help("[CONFIG]");
  auto r = parse(o, argc, argv);
  const hw::Topology topo = r.count("fixture") ? hw::load_topology(r["fixture"].as<std::string>())
                                             : hw::detect_topology();
  if (r.count("save")) hw::save_topology(topo, r["save"].as<std::string>());
  const TopoRequest q = topo_request(r, topo);
  const MeshShape shape = MeshShape::from_config(q.cfg.parallel, q.nproc * q.nnodes);
  const bool json = r.count("json") > 0;
  if (!json && topo.num_gpus() == 0) {
    std::printf("No NVIDIA GPU on this machine: %s.\nShow a fixture instead: meshtrain topo --fixture "
                "tests/fixtures/topology/dgx_a100.json --tp 4\n",
                topo.source.c_str());
    return 0;
  }
  if (!json) print_topology(topo, shape, q);
  const comm::Placement p = comm::place_tp(topo, shape, q.nproc, q.node, q.cfg.parallel.allow_slow_tp);
  if (json) {
    std::cout << placement_json(topo, shape, p).dump() << "\n";
    return 0;
  }
  print_placement(topo, p, q.nproc);
  return 0;
}

}  // namespace meshtrain::cli
