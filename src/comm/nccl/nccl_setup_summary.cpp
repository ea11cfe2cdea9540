#include "comm/nccl/nccl_setup_summary.h"

#include <algorithm>
#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/hw/topology_detect.h"

extern char** environ;

namespace meshtrain::comm {
namespace {

std::string env_or(const NcclSetupInputs& in, const std::string& k, const std::string& dflt) {
  const auto it = in.env.find(k);
  return it == in.env.end() ? dflt : it->second;
}

bool env_is(const NcclSetupInputs& in, const std::string& k, const std::string& v) { return env_or(in, k, "") == v; }

std::string within_node(const NcclSetupInputs& in) {
  if (in.local_ranks <= 1) return "none (one rank per node)";
  if (env_is(in, "NCCL_P2P_DISABLE", "1"))
    return env_is(in, "NCCL_SHM_DISABLE", "1") ? "network loopback (NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1)"
                                               : "shared memory through the host (NCCL_P2P_DISABLE=1)";
  const std::string level = env_or(in, "NCCL_P2P_LEVEL", "");
  if (in.local_nvlink_clique && (level.empty() || level != "LOC")) {
    std::string s = cat("NVLink P2P (", in.local_ranks, " ranks", in.nvswitch ? ", NVSwitch" : "", ")");
    if (in.nvswitch && !env_is(in, "NCCL_NVLS_ENABLE", "0")) s += ", NVLS where the GPUs support it";
    return s;
  }
  return cat("PCIe P2P or shared memory (no NVLink between all ", in.local_ranks, " ranks",
             level.empty() ? "" : "; NCCL_P2P_LEVEL=" + level, ")");
}

std::string across_nodes(const NcclSetupInputs& in) {
  if (in.nodes <= 1) return "none (one node)";
  if (const std::string net = env_or(in, "NCCL_NET", ""); !net.empty()) return cat(net, " (NCCL_NET)");
  if (in.infiniband && !env_is(in, "NCCL_IB_DISABLE", "1")) {
    std::string s = "IB/RoCE verbs";
    if (const std::string hca = env_or(in, "NCCL_IB_HCA", ""); !hca.empty()) s += " on " + hca;
    s += cat(", GPUDirect RDMA up to ", env_or(in, "NCCL_NET_GDR_LEVEL", "NCCL's default distance"));
    return s;
  }
  return cat("TCP sockets", env_or(in, "NCCL_SOCKET_IFNAME", "").empty() ? "" : " on " + env_or(in, "NCCL_SOCKET_IFNAME", ""),
             in.infiniband ? " (NCCL_IB_DISABLE=1)" : " (no InfiniBand/RoCE device)");
}

std::string algorithm(const NcclSetupInputs& in) {
  const std::string a = env_or(in, "NCCL_ALGO", ""), p = env_or(in, "NCCL_PROTO", "");
  if (a.empty() && p.empty())
    return "algorithm and protocol: NCCL's choice per op and size (NCCL_ALGO, NCCL_PROTO unset)";
  return cat("algorithm ", a.empty() ? "NCCL's choice" : a, ", protocol ", p.empty() ? "NCCL's choice" : p);
}

}  // namespace

std::string nccl_version_string(int code) {
  if (code <= 0) return "unknown";
  // NCCL_VERSION_CODE: major*10000 + minor*100 + patch from 2.9 on, major*1000 + minor*100 + patch before.
  if (code >= 10000) return cat(code / 10000, ".", code / 100 % 100, ".", code % 100);
  return cat(code / 1000, ".", code / 100 % 10, ".", code % 100);
}

std::string describe_nccl_setup(const NcclSetupInputs& in) {
  return cat("NCCL ", nccl_version_string(in.version_code), " | within the node: ", within_node(in),
             " | across nodes: ", across_nodes(in), " | ", algorithm(in));
}

NcclSetupInputs nccl_setup_inputs_here(int local_ranks, int nodes) {
  NcclSetupInputs in;
  in.local_ranks = local_ranks;
  in.nodes = nodes;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("NCCL_", 0) == 0 && kv.find('=') != std::string::npos) in.env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
  const hw::Topology t = hw::detect_topology();
  const int n = std::min(local_ranks, t.num_gpus());
  in.local_nvlink_clique = n == local_ranks && n > 1;
  for (int i = 0; i < n; ++i) {
    in.nvswitch = in.nvswitch || t.gpus[static_cast<size_t>(i)].nvswitch_links > 0;
    for (int j = 0; j < n; ++j) in.local_nvlink_clique = in.local_nvlink_clique && (i == j || t.nvlinked(i, j));
  }
  std::error_code ec;
  in.infiniband = std::filesystem::is_directory("/sys/class/infiniband", ec) &&
                  !std::filesystem::is_empty("/sys/class/infiniband", ec);
  return in;
}

}  // namespace meshtrain::comm
