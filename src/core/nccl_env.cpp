#include "meshtrain/core/nccl_env.h"

#include <algorithm>
#include <sstream>

#include "meshtrain/core/config_schema.h"
#include "meshtrain/core/error.h"

namespace meshtrain {

const std::vector<std::string>& known_nccl_variables() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> v = {
        // network selection and InfiniBand / RoCE
        "NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_IB_SL", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT",
        "NCCL_IB_DISABLE", "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_IB_QPS_PER_CONNECTION",
        "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_MERGE_NICS", "NCCL_NET",
        "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ", "NCCL_NET_PLUGIN", "NCCL_NET_DISABLE_INTRA",
        "NCCL_CROSS_NIC", "NCCL_COLLNET_ENABLE", "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY",
        "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD",
        // intra-node transports
        "NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "NCCL_P2P_NET_CHUNKSIZE", "NCCL_SHM_DISABLE", "NCCL_NVLS_ENABLE",
        "NCCL_NVLS_CHUNKSIZE", "NCCL_CUMEM_ENABLE", "NCCL_TOPO_FILE", "NCCL_TOPO_DUMP_FILE", "NCCL_IGNORE_CPU_AFFINITY",
        // algorithms, protocols, channels, buffers
        "NCCL_ALGO", "NCCL_PROTO", "NCCL_BUFFSIZE", "NCCL_NTHREADS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
        "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_CHUNKSIZE", "NCCL_TREE_THRESHOLD", "NCCL_LL128_BUFFSIZE",
        "NCCL_CGA_CLUSTER_SIZE", "NCCL_NCHANNELS_PER_NET_PEER",
        // diagnostics and behaviour
        "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_LAUNCH_MODE", "NCCL_CHECK_POINTERS",
        "NCCL_ASYNC_ERROR_HANDLING", "NCCL_COMM_BLOCKING", "NCCL_RAS_ENABLE", "NCCL_SET_THREAD_NAME",
        "NCCL_GRAPH_REGISTER", "NCCL_LOCAL_REGISTER", "NCCL_WORK_FIFO_DEPTH",
    };
    std::sort(v.begin(), v.end());
    return v;
  }();
  return kNames;
}

std::map<std::string, std::string> parse_nccl_env(const std::string& text, const std::string& where) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  const auto& known = known_nccl_variables();
  for (std::string pair; in >> pair;) {
    const auto eq = pair.find('=');
    MT_USER_CHECK(eq != std::string::npos && eq > 0, where, ": '", pair, "' is not NAME=VALUE (e.g. NCCL_IB_HCA=mlx5)");
    const std::string name = pair.substr(0, eq);
    if (!std::binary_search(known.begin(), known.end(), name)) {
      const std::string near = nearest_match(name, known);
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw UserError(cat(where, ": unknown NCCL variable '", name, "'", near.empty() ? "" : "; did you mean '" + near + "'?",
                          " (valid: ", list, ")"));
    }
    MT_USER_CHECK(out.emplace(name, pair.substr(eq + 1)).second, where, ": ", name, " is given twice");
  }
  return out;
}

}  // namespace meshtrain
