// attempt_key: which incarnation of the job's communicators this process belongs to, as the word their store
// keys carry. A restart of the whole group by the launcher is a new attempt (TORCHELASTIC_RESTART_COUNT); an
// in-place restart (train/in_place_restart.h) keeps the surviving processes and regroups them with the
// replacement of a lost one under a new generation of the same attempt. Every store key a communicator, the
// NCCL bootstrap or the progress board writes is under its incarnation's word, so the keys of a failed
// incarnation are never read by the next one.
#pragma once

#include <string>

namespace meshtrain::comm {

// "attempt<k>" in generation 0, "attempt<k>.<g>" after regrouping as generation g.
std::string attempt_key();

// The process's generation: 0 at start; set by an in-place restart before it makes its communicators anew.
void set_generation(int generation);
int generation();

}  // namespace meshtrain::comm
