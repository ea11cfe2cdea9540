// NvmlLibrary: libnvidia-ml.so.1 through dlopen, for every reader of NVML in hw (topology detection, GPU
// telemetry, node health), so no binary links NVML and a CPU build runs anywhere. The declarations are the
// few functions we call, copied from nvml.h's ABI (stable since R450): handles are opaque pointers, return
// codes ints, NVML_SUCCESS = 0. A function this driver lacks is a null pointer: its reading is absent.
//
// One instance per process (instance()), initialised on first use and shut down at exit: telemetry reads it
// every logged step, and nvmlInit costs milliseconds.
#pragma once

#include <string>

namespace meshtrain::hw {

using nvmlDevice_t = struct nvmlDevice_st*;
inline constexpr int NVML_SUCCESS = 0;
// NVML_NVLINK_MAX_LINKS (H100); older GPUs answer "invalid" above theirs.
inline constexpr unsigned kMaxNvLinks = 18;

// "00000000:07:00.0" / "0000:07:00.0" → "0000:07:00.0" lower case (sysfs's form), so NVML's bus ids and
// sysfs's compare equal.
std::string normal_bus_id(std::string id);

// nvmlPciInfo_t (v3); padded so a later, larger struct can never overrun us.
struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
  char reserved[192];
};
struct NvmlUtilization {  // nvmlUtilization_t
  unsigned int gpu, memory;
};
struct NvmlMemory {  // nvmlMemory_t (v1)
  unsigned long long total, free, used;
};

struct NvmlLibrary {
  // Required: without these NVML is unusable (ok() false).
  int (*count)(unsigned*) = nullptr;
  int (*handle)(unsigned, nvmlDevice_t*) = nullptr;
  // Optional, null where the driver lacks them.
  int (*handle_by_pci)(const char*, nvmlDevice_t*) = nullptr;
  int (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  int (*pci)(nvmlDevice_t, NvmlPciInfo*) = nullptr;
  int (*p2p)(nvmlDevice_t, nvmlDevice_t, int, int*) = nullptr;
  int (*ancestor)(nvmlDevice_t, nvmlDevice_t, int*) = nullptr;
  int (*affinity)(nvmlDevice_t, unsigned, unsigned long*) = nullptr;
  int (*link_state)(nvmlDevice_t, unsigned, int*) = nullptr;
  int (*link_remote_pci)(nvmlDevice_t, unsigned, NvmlPciInfo*) = nullptr;
  int (*link_remote_type)(nvmlDevice_t, unsigned, int*) = nullptr;  // R460+
  int (*power_usage)(nvmlDevice_t, unsigned*) = nullptr;                 // mW
  int (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;            // sensor 0 = GPU, °C
  int (*temperature_threshold)(nvmlDevice_t, int, unsigned*) = nullptr;  // 1 = slowdown
  int (*clock)(nvmlDevice_t, int, unsigned*) = nullptr;                  // 1 = SM, 2 = memory; MHz
  int (*max_clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  int (*utilization)(nvmlDevice_t, NvmlUtilization*) = nullptr;
  int (*memory)(nvmlDevice_t, NvmlMemory*) = nullptr;
  int (*throttle_reasons)(nvmlDevice_t, unsigned long long*) = nullptr;
  int (*ecc_errors)(nvmlDevice_t, int, int, unsigned long long*) = nullptr;  // (uncorrected=1, volatile=0)
  int (*retired_pages_pending)(nvmlDevice_t, int*) = nullptr;
  int (*remapped_rows)(nvmlDevice_t, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;  // A100+
  int (*pcie_width)(nvmlDevice_t, unsigned*) = nullptr;
  int (*pcie_max_width)(nvmlDevice_t, unsigned*) = nullptr;
  int (*pcie_gen)(nvmlDevice_t, unsigned*) = nullptr;
  int (*pcie_max_gen)(nvmlDevice_t, unsigned*) = nullptr;
  int (*power_limit)(nvmlDevice_t, unsigned*) = nullptr;          // enforced, mW
  int (*default_power_limit)(nvmlDevice_t, unsigned*) = nullptr;  // mW

  // The process's NVML, loaded and initialised on first call.
  static const NvmlLibrary& instance();

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }  // why not ok()

  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;
  ~NvmlLibrary();

 private:
  NvmlLibrary();
  void* lib_ = nullptr;
  int (*shutdown_)() = nullptr;
  bool ok_ = false;
  std::string why_;
};

}  // namespace meshtrain::hw
