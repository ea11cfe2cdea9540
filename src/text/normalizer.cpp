#include "meshtrain/text/normalizer.h"

namespace meshtrain::text {

std::string replace_literal(std::string_view text, std::string_view pattern, std::string_view content, long count) {
  std::string out;
  size_t pos = 0;
  for (long n = 0; !pattern.empty() && (count < 0 || n < count); ++n) {
    const size_t hit = text.find(pattern, pos);
    if (hit == std::string_view::npos) break;
    out.append(text, pos, hit - pos).append(content);
    pos = hit + pattern.size();
  }
  return out.append(text.substr(pos));
}

std::string normalize(std::string_view text, const std::vector<NormalizeStep>& steps) {
  std::string s(text);
  for (const NormalizeStep& step : steps) {
    if (step.kind == NormalizeStep::Kind::Prepend) {
      if (!s.empty()) s.insert(0, step.content);  // `tokenizers` prepends nothing to an empty string
      continue;
    }
    s = replace_literal(s, step.pattern, step.content);
  }
  return s;
}

}  // namespace meshtrain::text
