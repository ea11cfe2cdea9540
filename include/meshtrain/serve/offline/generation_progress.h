// GenerationProgress: an offline batch's progress on stderr (docs/serving.md "Offline generation"):
//   generate: 37/100 requests, 1520 tokens, 812 tokens/s, 9s left
// On a terminal one line redrawn in place at most 4 times a second; otherwise (a log file, a pipe) a plain line
// at most every MESHTRAIN_PROGRESS_EVERY_S seconds (default 5, the knob core/progress_meter.h reads). The last
// line ("done") is always printed. "left" is the mean time per finished request times the requests still to go.
#pragma once

#include <ostream>
#include <string>

#include "meshtrain/core/clock.h"
#include "meshtrain/serve/engine/generate_all.h"

namespace meshtrain::serve::offline {

class GenerationProgress {
 public:
  GenerationProgress(std::ostream& out, bool terminal);

  // After each step (GenerateOptions::on_step): prints when the last line is old enough.
  void update(const GenerateProgress& p);
  // The closing line.
  void finish(const GenerateProgress& p);

 private:
  std::string line(const GenerateProgress& p, double elapsed, bool done) const;
  void print(const std::string& text, bool done);

  std::ostream& out_;
  bool terminal_;
  double every_s_;
  Clock::time_point start_ = Clock::now();
  double last_ = -1;  // elapsed seconds at the last line printed; < 0: none yet
};

}  // namespace meshtrain::serve::offline
