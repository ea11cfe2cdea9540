// spdlog behind the facade of core/log.h. Output goes to stderr (stdout is left to program output such as
// `meshtrain config`), pattern "[time] [level] [rank N] message".
#include "meshtrain/core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "meshtrain/core/error.h"

namespace meshtrain::log {
namespace {

Options g_opts;
bool g_prefix = true;  // print "[rank N] " before messages
std::once_flag g_once;
std::shared_ptr<spdlog::logger> g_logger;

spdlog::level::level_enum to_spd(Level l) {
  switch (l) {
    case Level::Trace: return spdlog::level::trace;
    case Level::Debug: return spdlog::level::debug;
    case Level::Info: return spdlog::level::info;
    case Level::Warn: return spdlog::level::warn;
    case Level::Error: return spdlog::level::err;
    case Level::Off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

spdlog::logger& logger() {
  std::call_once(g_once, [] {
    g_logger = spdlog::stderr_color_mt("meshtrain");
    g_logger->set_level(to_spd(g_opts.level));
    g_logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  });
  return *g_logger;
}

std::string vformat(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap2);
  va_end(ap2);
  if (n <= 0) return {};
  std::string out(static_cast<size_t>(n), '\0');
  std::vsnprintf(out.data(), out.size() + 1, fmt, ap);
  return out;
}

void emit(Level l, const char* fmt, va_list ap) {
  if (!enabled(l)) return;
  std::string msg = vformat(fmt, ap);
  if (g_opts.rank >= 0 && g_prefix) msg = "[rank " + std::to_string(g_opts.rank) + "] " + msg;
  logger().log(to_spd(l), msg);
  if (l >= Level::Warn) logger().flush();
}

}  // namespace

Level parse_level(std::string_view name) {
  static constexpr std::pair<std::string_view, Level> kLevels[] = {
      {"trace", Level::Trace}, {"debug", Level::Debug}, {"info", Level::Info},
      {"warn", Level::Warn},   {"error", Level::Error}, {"off", Level::Off}};
  for (auto& [n, l] : kLevels)
    if (n == name) return l;
  throw UserError(cat("log level '", name, "' is not one of trace, debug, info, warn, error, off"));
}

std::string_view level_name(Level level) {
  static constexpr std::string_view kNames[] = {"trace", "debug", "info", "warn", "error", "off"};
  return kNames[static_cast<int>(level)];
}

void init(const Options& opts) {
  g_opts = opts;
  if (const char* env = std::getenv("MESHTRAIN_LOG_LEVEL"); env && *env) {
    try {
      g_opts.level = parse_level(env);
    } catch (const UserError& e) {
      std::fprintf(stderr, "MESHTRAIN_LOG_LEVEL: %s\n", e.what());
    }
  }
  if (const char* env = std::getenv("MESHTRAIN_LOG_ALL_RANKS"); env && *env) g_opts.all_ranks = env[0] == '1';
  // Under meshrun the launcher already prefixes each line with the rank; one prefix is enough.
  if (const char* env = std::getenv("MESHRUN_PREFIXES_OUTPUT"); env && env[0] == '1') g_prefix = false;
  logger().set_level(to_spd(g_opts.level));
}

const Options& options() { return g_opts; }

void set_level(Level level) {
  g_opts.level = level;
  logger().set_level(to_spd(level));
}

bool enabled(Level level) { return level != Level::Off && level >= g_opts.level; }

#define MT_LOG_IMPL(name, lvl)          \
  void name(const char* fmt, ...) {     \
    va_list ap;                         \
    va_start(ap, fmt);                  \
    emit(lvl, fmt, ap);                 \
    va_end(ap);                         \
  }
MT_LOG_IMPL(trace, Level::Trace)
MT_LOG_IMPL(debug, Level::Debug)
MT_LOG_IMPL(info, Level::Info)
MT_LOG_IMPL(warn, Level::Warn)
MT_LOG_IMPL(error, Level::Error)
#undef MT_LOG_IMPL

void progress(const char* fmt, ...) {
  if (g_opts.rank > 0 && !g_opts.all_ranks) return;
  va_list ap;
  va_start(ap, fmt);
  emit(Level::Info, fmt, ap);
  va_end(ap);
}

std::string sprintf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

}  // namespace meshtrain::log
