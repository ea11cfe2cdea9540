#include "hw/nvml_library.h"

#include <dlfcn.h>

#include <cctype>

#include "meshtrain/core/error.h"

namespace meshtrain::hw {
namespace {

template <typename F>
bool sym(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(::dlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

const NvmlLibrary& NvmlLibrary::instance() {
  static const NvmlLibrary kLib;
  return kLib;
}

NvmlLibrary::NvmlLibrary() {
  lib_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    why_ = cat("libnvidia-ml.so.1 not loadable (", ::dlerror(), ")");
    return;
  }
  int (*init)() = nullptr;
  if (!sym(lib_, "nvmlInit_v2", &init) || !sym(lib_, "nvmlShutdown", &shutdown_) ||
      !sym(lib_, "nvmlDeviceGetCount_v2", &count) || !sym(lib_, "nvmlDeviceGetHandleByIndex_v2", &handle)) {
    why_ = "libnvidia-ml.so.1 lacks a needed function (driver older than R450?)";
    shutdown_ = nullptr;
    return;
  }
  sym(lib_, "nvmlDeviceGetHandleByPciBusId_v2", &handle_by_pci);
  sym(lib_, "nvmlDeviceGetName", &name);
  sym(lib_, "nvmlDeviceGetPciInfo_v3", &pci);
  sym(lib_, "nvmlDeviceGetP2PStatus", &p2p);
  sym(lib_, "nvmlDeviceGetTopologyCommonAncestor", &ancestor);
  sym(lib_, "nvmlDeviceGetCpuAffinity", &affinity);
  sym(lib_, "nvmlDeviceGetNvLinkState", &link_state);
  sym(lib_, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &link_remote_pci);
  sym(lib_, "nvmlDeviceGetNvLinkRemoteDeviceType", &link_remote_type);
  sym(lib_, "nvmlDeviceGetPowerUsage", &power_usage);
  sym(lib_, "nvmlDeviceGetTemperature", &temperature);
  sym(lib_, "nvmlDeviceGetTemperatureThreshold", &temperature_threshold);
  sym(lib_, "nvmlDeviceGetClockInfo", &clock);
  sym(lib_, "nvmlDeviceGetMaxClockInfo", &max_clock);
  sym(lib_, "nvmlDeviceGetUtilizationRates", &utilization);
  sym(lib_, "nvmlDeviceGetMemoryInfo", &memory);
  // Renamed "clocks event reasons" in R535; the old name stays exported with the same bits.
  if (!sym(lib_, "nvmlDeviceGetCurrentClocksEventReasons", &throttle_reasons))
    sym(lib_, "nvmlDeviceGetCurrentClocksThrottleReasons", &throttle_reasons);
  sym(lib_, "nvmlDeviceGetTotalEccErrors", &ecc_errors);
  sym(lib_, "nvmlDeviceGetRetiredPagesPendingStatus", &retired_pages_pending);
  sym(lib_, "nvmlDeviceGetRemappedRows", &remapped_rows);
  sym(lib_, "nvmlDeviceGetCurrPcieLinkWidth", &pcie_width);
  sym(lib_, "nvmlDeviceGetMaxPcieLinkWidth", &pcie_max_width);
  sym(lib_, "nvmlDeviceGetCurrPcieLinkGeneration", &pcie_gen);
  sym(lib_, "nvmlDeviceGetMaxPcieLinkGeneration", &pcie_max_gen);
  sym(lib_, "nvmlDeviceGetEnforcedPowerLimit", &power_limit);
  sym(lib_, "nvmlDeviceGetPowerManagementDefaultLimit", &default_power_limit);
  if (int rc = init(); rc != NVML_SUCCESS) {
    why_ = cat("nvmlInit_v2 failed (NVML error ", rc, "; no NVIDIA driver loaded?)");
    shutdown_ = nullptr;  // nothing to shut down
    return;
  }
  ok_ = true;
}

NvmlLibrary::~NvmlLibrary() {
  if (shutdown_) shutdown_();
  if (lib_) ::dlclose(lib_);
}

std::string normal_bus_id(std::string id) {
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto colon = id.find(':');
  if (colon != std::string::npos && colon > 4) id = id.substr(colon - 4);
  return id;
}

}  // namespace meshtrain::hw
