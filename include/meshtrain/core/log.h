// Logging facade. Only src/core/log.cpp sees spdlog; this header includes neither fmt nor spdlog, so it can
// be used next to Torch's bundled fmt (docs/architecture.md "fmt clash"). Messages are printf-style and checked by the
// compiler: log::info("step %d loss %.4f", step, loss).
//
// Every line carries a rank prefix ("[rank 3]") once init() has been told the rank, unless meshrun already
// prefixes the worker's output (MESHRUN_PREFIXES_OUTPUT=1). Training progress is
// logged with log::progress(), which prints on rank 0 only unless all ranks were asked for
// (logging.all_ranks / MESHTRAIN_LOG_ALL_RANKS=1); warnings and errors print on every rank.
#pragma once

#include <string>
#include <string_view>

namespace meshtrain::log {

enum class Level { Trace, Debug, Info, Warn, Error, Off };

// "trace" | "debug" | "info" | "warn" | "error" | "off"; throws UserError naming the valid values.
Level parse_level(std::string_view name);
std::string_view level_name(Level level);

struct Options {
  int rank = -1;           // -1: no rank prefix (the launcher, single-process tools)
  Level level = Level::Info;
  bool all_ranks = false;  // progress() on every rank, not only rank 0
};

// Idempotent; may be called again when the rank becomes known. MESHTRAIN_LOG_LEVEL and
// MESHTRAIN_LOG_ALL_RANKS in the environment override `opts`.
void init(const Options& opts);
const Options& options();
void set_level(Level level);
bool enabled(Level level);

void trace(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Info-level training progress, rank 0 only by default.
void progress(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// printf into a std::string (for building messages outside the logger).
std::string sprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace meshtrain::log
