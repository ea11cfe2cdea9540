#include "meshtrain/text/normalizer.h"

namespace meshtrain::text {

std::string normalize(std::string_view text, const std::vector<NormalizeStep>& steps) {
  std::string s(text);
  for (const NormalizeStep& step : steps) {
    if (step.kind == NormalizeStep::Kind::Prepend) {
      if (!s.empty()) s.insert(0, step.content);  // `tokenizers` prepends nothing to an empty string
      continue;
    }
    std::string out;
    size_t pos = 0;
    for (size_t hit; !step.pattern.empty() && (hit = s.find(step.pattern, pos)) != std::string::npos;) {
      out.append(s, pos, hit - pos).append(step.content);
      pos = hit + step.pattern.size();
    }
    s = out.append(s, pos);
  }
  return s;
}

}  // namespace meshtrain::text
