#include "meshtrain/serve/offline/generation_progress.h"

#include <cstdio>
#include <cstdlib>

#include "meshtrain/core/error.h"

namespace meshtrain::serve::offline {
namespace {

constexpr double kTerminalEveryS = 0.25;  // a redrawn line: at most 4 times a second

double plain_line_every_s() {
  const char* v = std::getenv("MESHTRAIN_PROGRESS_EVERY_S");
  if (!v || !*v) return 5.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  return end && *end == '\0' && s >= 0 ? s : 5.0;  // a malformed knob keeps the default: progress is cosmetic
}

std::string whole_seconds(double s) {
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) return cat(t / 3600, "h", (t / 60) % 60, "m");
  if (t >= 60) return cat(t / 60, "m", t % 60, "s");
  return cat(t, "s");
}

}  // namespace

GenerationProgress::GenerationProgress(std::ostream& out, bool terminal)
    : out_(out), terminal_(terminal), every_s_(terminal ? kTerminalEveryS : plain_line_every_s()) {}

void GenerationProgress::update(const GenerateProgress& p) {
  const double elapsed = seconds_since(start_);
  if (elapsed - (last_ < 0 ? 0 : last_) < every_s_) return;  // quick work prints only its closing line
  last_ = elapsed;
  print(line(p, elapsed, false), false);
}

void GenerationProgress::finish(const GenerateProgress& p) { print(line(p, seconds_since(start_), true), true); }

std::string GenerationProgress::line(const GenerateProgress& p, double elapsed, bool done) const {
  const double rate = elapsed > 0 ? static_cast<double>(p.generated_tokens) / elapsed : 0;
  char rate_text[32];
  std::snprintf(rate_text, sizeof rate_text, "%.0f", rate);
  std::string s = cat("generate: ", p.finished, "/", p.total, " requests, ", p.generated_tokens, " tokens, ",
                      rate_text, " tokens/s");
  if (done) return cat(s, ", done in ", whole_seconds(elapsed));
  if (p.finished == 0) return s;
  const double left = elapsed / static_cast<double>(p.finished) * static_cast<double>(p.total - p.finished);
  return cat(s, ", ", whole_seconds(left), " left");
}

void GenerationProgress::print(const std::string& text, bool done) {
  // On a terminal the line is redrawn: \r to its start, and \x1b[K clears what a longer line left behind.
  if (terminal_) {
    out_ << '\r' << text << "\x1b[K" << (done ? "\n" : "") << std::flush;
  } else {
    out_ << text << std::endl;
  }
}

}  // namespace meshtrain::serve::offline
