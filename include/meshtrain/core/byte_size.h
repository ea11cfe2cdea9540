// Sizes written the way people type them: "64K", "8M", "1G" or plain bytes.
#pragma once

#include <cstddef>
#include <string>

namespace meshtrain {

// "64K", "1M", "1G" (binary multiples) or plain bytes, "B" allowed; `what` names the flag or config key in the
// UserError.
size_t parse_bytes(const std::string& what, const std::string& v);

}  // namespace meshtrain
