// StagingCommunicator: a backend that takes host tensors (the CPU backend), fed tensors that live elsewhere.
// The one place where device tensors are staged through host memory, so that no caller stages by hand:
// make_communicator installs it when the caller's device is a GPU and the backend does not take that
// device's tensors, and split() of a staged communicator returns a staged one.
//
// Per op: every input on another device (or not contiguous) is copied into a host buffer (pinned when it
// comes from a GPU) on the caller's current stream, and the host waits for that copy, so the copy is
// ordered after the tensor's producers on that stream. The backend's op then runs on the host copies,
// asynchronously as before; the returned StagingWork copies each result back into the caller's tensor on
// the caller's current stream at wait(), so consumers queued after wait() on that stream see it (the
// start/finish overlap of DDP buckets and FSDP prefetch is kept). These are the copies the callers made
// themselves before; a broadcast copies down only on the root and back only on the others. Tensors already
// where the backend takes them pass through untouched, and a group of one moves nothing.
#pragma once

#include <c10/core/Device.h>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::comm {

// `inner` takes tensors on inner->device(); `caller` is where the caller's tensors live (a GPU). The
// result's device() is inner's, and it also takes tensors on `caller` (and non-contiguous ones).
CommPtr make_staging_communicator(CommPtr inner, c10::Device caller);

}  // namespace meshtrain::comm
