// How long the calling thread has waited for other ranks: the time blocked in Work::wait() of a backend
// whose wait blocks the host (the CPU backend, staged or not). The trainer subtracts it from a step's wall
// time to get the rank's own compute time, which names a straggler: the slow rank waits least. NCCL's wait()
// only orders streams, so under NCCL this stays 0 and compute time is the host's step time.
#pragma once

namespace meshtrain::comm {

// Seconds, since the thread started; compare two readings on the same thread.
double blocked_in_wait_seconds();
// Backends: adds `seconds` to the calling thread's total.
void add_blocked_in_wait(double seconds);

}  // namespace meshtrain::comm
