#include "meshtrain/core/progress_meter.h"

#include <algorithm>
#include <cstdlib>

#include "meshtrain/core/log.h"

namespace meshtrain {
namespace {

double env_seconds(const char* name, double def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  return end && *end == '\0' && s >= 0 ? s : def;  // a malformed knob keeps the default: progress is cosmetic
}

std::string duration(double s) {
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) return log::sprintf("%ldh%02ldm", t / 3600, (t / 60) % 60);
  if (t >= 60) return log::sprintf("%ldm%02lds", t / 60, t % 60);
  return log::sprintf("%lds", t);
}

}  // namespace

ProgressMeter::ProgressMeter(std::string label, uint64_t total_bytes, Sink sink)
    : label_(std::move(label)),
      total_(total_bytes),
      sink_(sink ? std::move(sink) : Sink([](const std::string& l) { log::progress("%s", l.c_str()); })),
      after_s_(env_seconds("MESHTRAIN_PROGRESS_AFTER_S", 3.0)),
      every_s_(env_seconds("MESHTRAIN_PROGRESS_EVERY_S", 5.0)) {}

std::string ProgressMeter::line(double elapsed, bool final) const {
  const uint64_t d = done();
  const double rate = elapsed > 0 ? static_cast<double>(d) / elapsed : 0;
  const double pct = total_ ? 100.0 * static_cast<double>(d) / static_cast<double>(total_) : 100.0;
  std::string l = log::sprintf("%s: %.1f / %.1f GB (%.0f%%), %.2f GB/s", label_.c_str(), static_cast<double>(d) / 1e9,
                               static_cast<double>(total_) / 1e9, pct, rate / 1e9);
  if (final) return l + ", done in " + duration(elapsed);
  const double left = rate > 0 ? static_cast<double>(total_ - std::min(d, total_)) / rate : 0;
  return l + ", " + (rate > 0 ? duration(left) : std::string("?")) + " left";
}

void ProgressMeter::report() {
  const double t = seconds_since(start_);
  if (t < after_s_ || (last_ >= 0 && t - last_ < every_s_)) return;
  last_ = t;
  sink_(line(t, false));
}

void ProgressMeter::finish() {
  const double t = seconds_since(start_);
  if (last_ < 0 && t < after_s_) return;  // quick: nothing was said, nothing to close
  sink_(line(t, true));
}

double ProgressMeter::poll_s() const {
  const double t = seconds_since(start_);
  const double next = last_ < 0 ? after_s_ : last_ + every_s_;
  return std::clamp(next - t, 0.05, 1.0);
}

}  // namespace meshtrain
