// The one line a run logs about NCCL (rank 0, once, when the first NCCL communicator is up): the library's
// version, the transport it will use within a node and across nodes, and how it picks its algorithm and
// protocol — resolved from what NCCL itself decides from: the comm.nccl_env variables in effect, the node's
// NVLink topology (hw) and the presence of InfiniBand/RoCE devices. NCCL prints the per-channel detail only
// with NCCL_DEBUG=INFO; this line is the summary a user can compare against the docs/nccl.md presets.
// Pure (no CUDA), so it is unit-tested on any machine; nccl_communicator.cpp gathers the inputs.
#pragma once

#include <map>
#include <string>

namespace meshtrain::comm {

struct NcclSetupInputs {
  int version_code = 0;                    // ncclGetVersion's: 22105 = 2.21.5 (before 2.9: 2708 = 2.7.8)
  std::map<std::string, std::string> env;  // the NCCL_* variables in effect
  int local_ranks = 1, nodes = 1;
  bool local_nvlink_clique = false;  // this node's ranks' GPUs are pairwise NVLinked
  bool nvswitch = false;             // … through NVSwitches
  bool infiniband = false;           // /sys/class/infiniband holds a device
};

// "2.21.5"; "unknown" for 0.
std::string nccl_version_string(int code);
// "NCCL 2.21.5 | within the node: NVLink P2P (8 ranks, NVSwitch) | across nodes: none (one node) | algorithm
// and protocol: NCCL's choice per op and size (NCCL_ALGO, NCCL_PROTO unset)".
std::string describe_nccl_setup(const NcclSetupInputs& in);
// The inputs on this machine (version_code left to the caller, which has NCCL linked).
NcclSetupInputs nccl_setup_inputs_here(int local_ranks, int nodes);

}  // namespace meshtrain::comm
