#include "meshtrain/comm/wait_clock.h"

#include <atomic>
#include <cstdint>

namespace meshtrain::comm {
namespace {
thread_local double t_blocked = 0;  // per thread: a checkpoint thread's waits are not the step's
std::atomic<int64_t> g_device_wait_ns{0};  // every communicator's watchdog adds to it
}  // namespace

double blocked_in_wait_seconds() { return t_blocked; }
void add_blocked_in_wait(double seconds) { t_blocked += seconds; }

double device_wait_seconds() { return static_cast<double>(g_device_wait_ns.load()) * 1e-9; }
void add_device_wait(double seconds) { g_device_wait_ns.fetch_add(static_cast<int64_t>(seconds * 1e9)); }

}  // namespace meshtrain::comm
