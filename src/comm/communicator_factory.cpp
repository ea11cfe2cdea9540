// Backend selection; see communicator_factory.h.
#include "meshtrain/comm/communicator_factory.h"

#include <ATen/Context.h>

#include "comm/diagnostics/flight_recorder.h"
#include "comm/staging/staging_communicator.h"
#include "meshtrain/comm/cpu_communicator.h"
#include "meshtrain/core/error.h"
#ifdef MESHTRAIN_WITH_CUDA
#include "comm/nccl/nccl_communicator.h"
#endif

namespace meshtrain::comm {

bool nccl_built() {
#ifdef MESHTRAIN_WITH_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

CommPtr make_backend(CommBackend backend, const WorldInfo& world, const CommSetup& s, StorePtr store) {
  if (backend == CommBackend::cpu) return make_cpu_communicator(store, world.rank, world.world_size, s.group, s.timeout);
#ifdef MESHTRAIN_WITH_CUDA
  NcclCommOptions o;
  o.timeout = s.timeout;
  const int device = s.device.has_index() ? s.device.index() : world.local_rank;
  return make_nccl_communicator(store, world.rank, world.world_size, s.group, device, o);
#else
  throw Error("unreachable: resolve_backend returned nccl in a build without NCCL");
#endif
}

}  // namespace

CommBackend resolve_backend(CommBackend backend, const c10::Device& device, const std::string& origin) {
  if (backend == CommBackend::cpu) return CommBackend::cpu;
  if (backend == CommBackend::automatic) return nccl_built() && device.is_cuda() ? CommBackend::nccl : CommBackend::cpu;
  MT_USER_CHECK(nccl_built(), origin, ": 'nccl' needs a meshtrain built with CUDA and NCCL, and this one "
                "was built without (MESHTRAIN_CUDA=OFF or no toolkit found); use cpu or auto");
  MT_USER_CHECK(device.is_cuda(), origin, ": 'nccl' takes tensors on a CUDA device, but this run's device "
                "is ", device.str(), "; use train.device cuda, or parallel.backend cpu");
  const auto n = static_cast<long long>(at::getNumGPUs());
  MT_USER_CHECK(at::hasCUDA() && n > 0, origin, ": 'nccl' needs a CUDA device, and none is visible");
  MT_USER_CHECK(device.index() < n, origin, ": 'nccl' on ", device.str(), ", but only ", n,
                " CUDA device(s) are visible (check LOCAL_RANK and CUDA_VISIBLE_DEVICES)");
  return CommBackend::nccl;
}

CommPtr make_communicator(const WorldInfo& world, const CommSetup& s, StorePtr store) {
  const CommBackend backend = resolve_backend(s.backend, s.device, s.origin);
  MT_USER_CHECK(s.timeout.count() > 0, "parallel.timeout_s must be > 0");
  if (!s.flight_dir.empty()) FlightRecorder::process().set_preferred_dir(s.flight_dir);
  if (!store && world.world_size > 1) store = connect_store_from_env(s.timeout);
  CommPtr c = make_backend(backend, world, s, std::move(store));
  // A backend that cannot take the caller's tensors gets them through host memory (staging_communicator.h).
  if (!s.device.is_cpu() && !c->takes(s.device)) c = make_staging_communicator(std::move(c), s.device);
  return c;
}

c10::Device rank_cuda_device(CommBackend backend, int local_rank, int gpus, const std::string& origin) {
  MT_USER_CHECK(gpus > 0, origin, ": no CUDA device is visible to local rank ", local_rank);
  const bool device_backend = backend == CommBackend::nccl || (backend == CommBackend::automatic && nccl_built());
  MT_USER_CHECK(!device_backend || local_rank < gpus, origin, ": local rank ", local_rank, " has no GPU of its own (",
                gpus, " visible): NCCL needs one GPU per rank; parallel.backend: cpu lets ranks share GPUs");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % gpus));
}

}  // namespace meshtrain::comm
