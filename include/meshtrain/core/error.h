// Errors: one mechanism per layer (docs/architecture.md "Error policy"). Library code throws meshtrain::Error
// carrying where it was raised; apps/ turn it into one clear line on stderr and a non-zero exit. A user's mistake (bad config,
// missing file, bad flag) is a UserError: the message alone is shown, no source location, exit code 2.
#pragma once

#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

namespace meshtrain {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A caller's or user's mistake: the message is the whole story (file, key or flag, what is valid).
class UserError : public Error {
 public:
  explicit UserError(const std::string& what) : Error(what) {}
};

// Concatenates anything streamable: cat("dp(", dp, ") × tp(", tp, ")").
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace meshtrain

// Internal invariant or caller contract; message parts are streamed.
#define MT_CHECK(cond, ...)                                                                     \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      throw ::meshtrain::Error(::meshtrain::cat(__FILE__, ":", __LINE__, ": ", __VA_ARGS__));   \
    }                                                                                           \
  } while (0)

// A user-facing error: no source location, message names the file/key/flag and what is valid.
#define MT_USER_CHECK(cond, ...)                                       \
  do {                                                                 \
    if (!(cond)) {                                                     \
      throw ::meshtrain::UserError(::meshtrain::cat(__VA_ARGS__));     \
    }                                                                  \
  } while (0)

// Wraps a syscall returning -1 on failure; the message gets strerror(errno).
#define SYS_CHECK(expr, ...)                                                                         \
  do {                                                                                               \
    if ((expr) == -1) {                                                                              \
      int mt_errno_ = errno;                                                                         \
      throw ::meshtrain::Error(::meshtrain::cat(__FILE__, ":", __LINE__, ": " #expr ": ",            \
                                                ::meshtrain::cat(__VA_ARGS__), ": ", std::strerror(mt_errno_))); \
    }                                                                                                \
  } while (0)
