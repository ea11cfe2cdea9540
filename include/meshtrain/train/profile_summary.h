// The readable half of a profile: which kernels (or, on CPU, which ops) took the profiled steps' time,
// grouped by the phase of the step that issued them — forward, backward, optimizer, communication.
//
// Pure arithmetic over a plain list of events (what the profiler recorded, copied out by
// train/step_profiler.h), so it is unit-tested without a profiler or a GPU. How an event gets its phase:
//   - a name with "nccl" in it (NCCL kernels) or under a "meshtrain::comm" scope: communication;
//   - a CPU op nested (same thread) in an "autograd::engine::evaluate_function" scope: backward;
//   - a CPU op that starts inside a "meshtrain::optimizer" scope: optimizer (clipping, AdamW, zeroing);
//   - another CPU op inside a "meshtrain::step" scope: forward; outside every step: other;
//   - a device event (kernel, memcpy, memset): the phase of the CPU op that launched it (by correlation id),
//     else the phase whose interval contains its own start.
// Rows are device events where there are any (GPU time), else CPU ops' self time (time not spent in an op
// nested inside them), so nothing is counted twice.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::train {

struct ProfileEvent {
  std::string name;
  bool on_device = false;    // a GPU kernel, memcpy or memset; false: a CPU op or scope
  uint64_t thread = 0;       // CPU events: the thread that ran it
  int64_t start_ns = 0, end_ns = 0;
  uint64_t correlation = 0;  // CPU op: its id; device event: the id of the CPU op that launched it; 0: none
};

enum class StepPhase { forward, backward, optimizer, communication, other };
constexpr int kStepPhases = 5;
const char* step_phase_name(StepPhase p);

struct ProfileRow {
  StepPhase phase;
  std::string name;
  int64_t calls = 0;
  int64_t total_ns = 0;
};

struct ProfileSummary {
  int64_t steps = 0;                          // "meshtrain::step" scopes seen
  int64_t wall_ns = 0;                        // their summed wall time
  bool device = false;                        // rows are device events (else CPU ops' self time)
  int64_t busy_ns = 0;                        // time with at least one row's event running (union)
  std::array<int64_t, kStepPhases> phase_ns{};  // rows' time per phase
  std::vector<ProfileRow> rows;               // by total time, largest first
};

ProfileSummary summarize_profile(const std::vector<ProfileEvent>& events);
// The top `top` rows, with each phase's share of the profiled time and of the step's wall time.
std::string profile_table(const ProfileSummary& s, int top);
std::string profile_json(const ProfileSummary& s);

}  // namespace meshtrain::train
