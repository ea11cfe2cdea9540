#include "meshtrain/comm/wait_clock.h"

namespace meshtrain::comm {
namespace {
thread_local double t_blocked = 0;  // per thread: a checkpoint thread's waits are not the step's
}  // namespace

double blocked_in_wait_seconds() { return t_blocked; }
void add_blocked_in_wait(double seconds) { t_blocked += seconds; }

}  // namespace meshtrain::comm
