#include "meshtrain/train/profile_summary.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "meshtrain/core/log.h"

namespace meshtrain::train {
namespace {

constexpr std::string_view kStepScope = "meshtrain::step";
constexpr std::string_view kOptimizerScope = "meshtrain::optimizer";
constexpr std::string_view kCommScope = "meshtrain::comm";
constexpr std::string_view kBackwardScope = "autograd::engine::evaluate_function";

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

bool is_comm_name(const std::string& name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("nccl") != std::string::npos;
}

bool is_scope(const std::string& name) { return starts_with(name, "meshtrain::"); }

struct Interval {
  int64_t start, end;
  bool contains(int64_t t) const { return t >= start && t < end; }
};

std::vector<Interval> intervals_named(const std::vector<ProfileEvent>& events, std::string_view name) {
  std::vector<Interval> out;
  for (const auto& e : events)
    if (!e.on_device && e.name == name) out.push_back({e.start_ns, e.end_ns});
  return out;
}

bool inside_any(const std::vector<Interval>& spans, int64_t t) {
  return std::any_of(spans.begin(), spans.end(), [t](const Interval& i) { return i.contains(t); });
}

// What the step's own scopes say about time t (for events with nothing better to go by).
StepPhase phase_at(int64_t t, const std::vector<Interval>& steps, const std::vector<Interval>& optimizer) {
  if (inside_any(optimizer, t)) return StepPhase::optimizer;
  return inside_any(steps, t) ? StepPhase::forward : StepPhase::other;
}

// CPU events per thread, nested by time: each op's self time and phase (inherited from enclosing scopes).
struct CpuOp {
  const ProfileEvent* e;
  StepPhase phase;
  int64_t self_ns;
};

std::vector<CpuOp> walk_cpu_ops(const std::vector<ProfileEvent>& events, const std::vector<Interval>& steps,
                                const std::vector<Interval>& optimizer) {
  std::map<uint64_t, std::vector<const ProfileEvent*>> by_thread;
  for (const auto& e : events)
    if (!e.on_device) by_thread[e.thread].push_back(&e);
  std::vector<CpuOp> ops;
  for (auto& [thread, list] : by_thread) {
    std::sort(list.begin(), list.end(), [](const ProfileEvent* a, const ProfileEvent* b) {
      return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns > b->end_ns;
    });
    std::vector<size_t> stack;  // indices into ops of the enclosing events
    for (const ProfileEvent* e : list) {
      while (!stack.empty() && ops[stack.back()].e->end_ns <= e->start_ns) stack.pop_back();
      StepPhase phase = phase_at(e->start_ns, steps, optimizer);
      if (!stack.empty() && ops[stack.back()].phase != StepPhase::other && ops[stack.back()].phase != StepPhase::forward)
        phase = ops[stack.back()].phase;  // backward / optimizer / communication pass down to nested ops
      if (starts_with(e->name, kBackwardScope)) phase = StepPhase::backward;
      if (starts_with(e->name, kCommScope) || is_comm_name(e->name)) phase = StepPhase::communication;
      const int64_t dur = e->end_ns - e->start_ns;
      if (!stack.empty()) ops[stack.back()].self_ns -= dur;
      ops.push_back({e, phase, dur});
      stack.push_back(ops.size() - 1);
    }
  }
  return ops;
}

// Total time covered by at least one interval.
int64_t union_ns(std::vector<Interval> spans) {
  std::sort(spans.begin(), spans.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  int64_t total = 0, end = INT64_MIN;
  for (const auto& s : spans) {
    if (s.start >= end) {
      total += s.end - s.start;
      end = s.end;
    } else if (s.end > end) {
      total += s.end - end;
      end = s.end;
    }
  }
  return total;
}

struct RowKey {
  StepPhase phase;
  std::string name;
  bool operator<(const RowKey& o) const { return phase != o.phase ? phase < o.phase : name < o.name; }
};

void add_row(std::map<RowKey, ProfileRow>& rows, StepPhase phase, const std::string& name, int64_t ns) {
  auto& r = rows[{phase, name}];
  r.phase = phase;
  r.name = name;
  r.calls += 1;
  r.total_ns += ns;
}

}  // namespace

const char* step_phase_name(StepPhase p) {
  switch (p) {
    case StepPhase::forward: return "forward";
    case StepPhase::backward: return "backward";
    case StepPhase::optimizer: return "optimizer";
    case StepPhase::communication: return "communication";
    case StepPhase::other: return "other";
  }
  return "?";
}

ProfileSummary summarize_profile(const std::vector<ProfileEvent>& events) {
  const auto steps = intervals_named(events, kStepScope);
  const auto optimizer = intervals_named(events, kOptimizerScope);
  const auto ops = walk_cpu_ops(events, steps, optimizer);
  ProfileSummary s;
  s.steps = static_cast<int64_t>(steps.size());
  for (const auto& i : steps) s.wall_ns += i.end - i.start;
  s.device = std::any_of(events.begin(), events.end(), [](const ProfileEvent& e) { return e.on_device; });

  std::map<RowKey, ProfileRow> rows;
  std::vector<Interval> busy;
  if (s.device) {
    std::unordered_map<uint64_t, StepPhase> launched_by;
    for (const auto& op : ops)
      if (op.e->correlation != 0) launched_by[op.e->correlation] = op.phase;
    for (const auto& e : events) {
      if (!e.on_device) continue;
      StepPhase phase = phase_at(e.start_ns, steps, optimizer);
      if (auto it = launched_by.find(e.correlation); e.correlation != 0 && it != launched_by.end()) phase = it->second;
      if (is_comm_name(e.name)) phase = StepPhase::communication;
      add_row(rows, phase, e.name, e.end_ns - e.start_ns);
      busy.push_back({e.start_ns, e.end_ns});
    }
  } else {
    for (const auto& op : ops) {
      if (is_scope(op.e->name) || starts_with(op.e->name, kBackwardScope)) continue;  // wrappers, not work
      add_row(rows, op.phase, op.e->name, op.self_ns);
      busy.push_back({op.e->start_ns, op.e->end_ns});
    }
  }
  s.busy_ns = union_ns(std::move(busy));
  for (auto& [key, row] : rows) {
    s.phase_ns[static_cast<int>(row.phase)] += row.total_ns;
    s.rows.push_back(std::move(row));
  }
  std::sort(s.rows.begin(), s.rows.end(), [](const ProfileRow& a, const ProfileRow& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  return s;
}

std::string profile_table(const ProfileSummary& s, int top) {
  int64_t total = 0;
  for (int64_t ns : s.phase_ns) total += ns;
  const double wall_ms = static_cast<double>(s.wall_ns) / 1e6;
  const double per = s.steps > 0 ? static_cast<double>(s.steps) : 1.0;
  std::string out = log::sprintf("profile: %lld step(s), %.2f ms/step wall; %s busy %.1f%% of it\n",
                                 static_cast<long long>(s.steps), wall_ms / per, s.device ? "device" : "CPU ops",
                                 s.wall_ns > 0 ? 100.0 * static_cast<double>(s.busy_ns) / static_cast<double>(s.wall_ns) : 0.0);
  out += log::sprintf("%-14s %10s %7s\n", "phase", "ms/step", "share");
  for (int p = 0; p < kStepPhases; ++p) {
    if (s.phase_ns[p] == 0) continue;
    out += log::sprintf("%-14s %10.3f %6.1f%%\n", step_phase_name(static_cast<StepPhase>(p)),
                        static_cast<double>(s.phase_ns[p]) / 1e6 / per,
                        total > 0 ? 100.0 * static_cast<double>(s.phase_ns[p]) / static_cast<double>(total) : 0.0);
  }
  out += log::sprintf("%-14s %8s %10s %7s  %s\n", "phase", "calls", "ms/step", "share", s.device ? "kernel" : "op (self time)");
  for (size_t i = 0; i < s.rows.size() && static_cast<int>(i) < top; ++i) {
    const auto& r = s.rows[i];
    std::string name = r.name;  // kernel names of templated code run to hundreds of characters
    if (name.size() > 90) name.replace(87, std::string::npos, "...");
    out += log::sprintf("%-14s %8lld %10.3f %6.1f%%  %s\n", step_phase_name(r.phase),
                        static_cast<long long>(r.calls), static_cast<double>(r.total_ns) / 1e6 / per,
                        total > 0 ? 100.0 * static_cast<double>(r.total_ns) / static_cast<double>(total) : 0.0,
                        name.c_str());
  }
  return out;
}

std::string profile_json(const ProfileSummary& s) {
  nlohmann::json phases = nlohmann::json::object();
  for (int p = 0; p < kStepPhases; ++p) phases[step_phase_name(static_cast<StepPhase>(p))] = s.phase_ns[p];
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : s.rows)
    rows.push_back({{"phase", step_phase_name(r.phase)}, {"name", r.name}, {"calls", r.calls}, {"total_ns", r.total_ns}});
  nlohmann::json j = {{"steps", s.steps}, {"wall_ns", s.wall_ns},     {"device", s.device},
                      {"busy_ns", s.busy_ns}, {"phase_ns", phases}, {"rows", rows}};
  return j.dump(1);
}

}  // namespace meshtrain::train
