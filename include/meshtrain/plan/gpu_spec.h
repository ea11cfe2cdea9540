// GpuSpec: what the planner needs to know about one GPU model — its memory, its dense bf16 peak, and the rates
// of the links a collective can take (NVLink inside a node, PCIe to the host, the network between nodes).
//
// The link figures are achievable bus bandwidths per GPU (what nccl-tests reports as busbw for large
// messages), not the data-sheet totals: NVLink 4 on an H100/H200 HGX board ≈ 360 GB/s for all-reduce of the
// 900 GB/s bidirectional figure, NVLink 3 on an A100 board ≈ 230 GB/s of 600. The network rate assumes one
// 400 Gb/s NIC per GPU (≈ 45 GB/s busbw), PCIe Gen4/Gen5 x16 to the host ≈ 22/45 GB/s. The memory bandwidth is
// the data sheet's; the step-time model applies the fraction its passes were measured to reach (step_time.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::plan {

struct GpuSpec {
  std::string name;             // "h200-141gb"
  int64_t memory_bytes = 0;     // what the device reports as total memory (cudaDeviceProp::totalGlobalMem)
  double peak_flops = 0;        // dense bf16 tensor-core peak, FLOP/s
  double nvlink_bytes_s = 0;    // collective bus bandwidth inside a node
  double pcie_bytes_s = 0;      // host ↔ device (offload, host staging)
  double network_bytes_s = 0;   // collective bus bandwidth between nodes, per GPU
  int64_t context_bytes = 0;    // CUDA context, kernels and library handles: held outside the caching allocator
  double hbm_bytes_s = 0;       // device memory bandwidth (data sheet): what passes over the parameters take
};

// The named GPU; UserError naming `flag` and the valid names otherwise.
GpuSpec gpu_spec(const std::string& name, const std::string& flag = "--gpu");
// l4-24gb | a100-40gb | a100-80gb | h100-80gb | h200-141gb
std::vector<std::string> gpu_names();

}  // namespace meshtrain::plan
