// How long a rank has waited for the others, two ways:
//   - blocked_in_wait_seconds: the calling thread's time blocked in Work::wait() of a backend whose wait blocks
//     the host (the CPU backend, staged or not);
//   - device_wait_seconds: the GPU's time inside NCCL collectives (each op timed from an event recorded just
//     before it to one just after, waiting for peers included), process-wide. NCCL's wait() only orders
//     streams, so the host never blocks there; the op is counted when the communicator's watchdog sees it
//     complete, so a step's last ops may be counted in the next step's reading (≤ one watchdog period late).
// The trainer subtracts both from a step's wall time to get the rank's own compute time, which names a
// straggler: the slow rank waits least.
#pragma once

namespace meshtrain::comm {

// Seconds, since the thread started; compare two readings on the same thread.
double blocked_in_wait_seconds();
// Backends: adds `seconds` to the calling thread's total.
void add_blocked_in_wait(double seconds);

// Seconds since the process started; compare two readings.
double device_wait_seconds();
// The NCCL backend: adds one op's GPU time (any thread).
void add_device_wait(double seconds);

}  // namespace meshtrain::comm
