// The line a run logs about NCCL: version codes of both eras, the intra-node transport from the topology and
// the P2P/SHM variables, the network from NCCL_NET / InfiniBand presence / NCCL_IB_DISABLE, the algorithm
// from NCCL_ALGO / NCCL_PROTO.
#include <gtest/gtest.h>

#include "comm/nccl/nccl_setup_summary.h"

using namespace meshtrain::comm;

TEST(NcclSetupSummary, VersionCodes) {
  EXPECT_EQ(nccl_version_string(22105), "2.21.5");
  EXPECT_EQ(nccl_version_string(22703), "2.27.3");
  EXPECT_EQ(nccl_version_string(2708), "2.7.8");
  EXPECT_EQ(nccl_version_string(0), "unknown");
}

TEST(NcclSetupSummary, NvlinkNodeWithDefaults) {
  NcclSetupInputs in{.version_code = 22105, .local_ranks = 8, .nodes = 1, .local_nvlink_clique = true, .nvswitch = true};
  EXPECT_EQ(describe_nccl_setup(in),
            "NCCL 2.21.5 | within the node: NVLink P2P (8 ranks, NVSwitch), NVLS where the GPUs support it | across "
            "nodes: none (one node) | algorithm and protocol: NCCL's choice per op and size (NCCL_ALGO, NCCL_PROTO "
            "unset)");
  in.env = {{"NCCL_NVLS_ENABLE", "0"}, {"NCCL_ALGO", "Ring"}};
  const std::string s = describe_nccl_setup(in);
  EXPECT_NE(s.find("NVLink P2P (8 ranks, NVSwitch) |"), std::string::npos) << s;
  EXPECT_NE(s.find("algorithm Ring, protocol NCCL's choice"), std::string::npos) << s;
}

TEST(NcclSetupSummary, ClustersAndOverrides) {
  NcclSetupInputs ib{.version_code = 22105, .env = {{"NCCL_IB_HCA", "mlx5_0,mlx5_1"}, {"NCCL_NET_GDR_LEVEL", "PHB"}},
                     .local_ranks = 8, .nodes = 4, .local_nvlink_clique = true, .infiniband = true};
  EXPECT_NE(describe_nccl_setup(ib).find("across nodes: IB/RoCE verbs on mlx5_0,mlx5_1, GPUDirect RDMA up to PHB"),
            std::string::npos);
  ib.env["NCCL_IB_DISABLE"] = "1";
  ib.env["NCCL_SOCKET_IFNAME"] = "eth0";
  EXPECT_NE(describe_nccl_setup(ib).find("across nodes: TCP sockets on eth0 (NCCL_IB_DISABLE=1)"), std::string::npos);
  NcclSetupInputs pcie{.local_ranks = 4, .nodes = 2, .local_nvlink_clique = false};
  EXPECT_NE(describe_nccl_setup(pcie).find("within the node: PCIe P2P or shared memory (no NVLink between all 4 ranks)"),
            std::string::npos);
  EXPECT_NE(describe_nccl_setup(pcie).find("TCP sockets (no InfiniBand/RoCE device)"), std::string::npos);
  pcie.env["NCCL_P2P_DISABLE"] = "1";
  EXPECT_NE(describe_nccl_setup(pcie).find("shared memory through the host (NCCL_P2P_DISABLE=1)"), std::string::npos);
  pcie.env["NCCL_NET"] = "Socket";
  EXPECT_NE(describe_nccl_setup(pcie).find("across nodes: Socket (NCCL_NET)"), std::string::npos);
}

TEST(NcclSetupSummary, InputsHereNeverThrow) {
  const NcclSetupInputs in = nccl_setup_inputs_here(2, 1);
  EXPECT_EQ(in.local_ranks, 2);
  EXPECT_FALSE(describe_nccl_setup(in).empty());
}
