// Worker output → console and per-rank files. Each worker stream is read from its pipe, split into lines,
// and each whole line is written with one write() as "[rank N]: line", so lines of different ranks never
// interleave mid-line (a worker's own interleaving of stdout and stderr is preserved per stream).
// The last lines of each stderr are kept for the root-cause summary.
#pragma once

#include <deque>
#include <string>
#include <vector>

namespace meshtrain::launch {

struct StreamRoute {
  int rank = 0;
  bool is_stderr = false;
  std::string prefix;     // console prefix; empty = "[rank N]: " (--log-line-prefix-template)
  int console_fd = -1;    // 1 or 2; -1 = not shown (redirected or filtered out)
  std::string file_path;  // empty = no file
};

class LogRouter {
 public:
  static constexpr size_t kTailLines = 10;
  LogRouter() = default;
  LogRouter(const LogRouter&) = delete;
  LogRouter& operator=(const LogRouter&) = delete;
  ~LogRouter();

  // Takes ownership of `fd` (a non-blocking pipe read end). Returns the stream's index.
  size_t add(int fd, const StreamRoute& route);
  // Fds still open, for poll(); index i of fds() is stream stream_of(i).
  void poll_fds(std::vector<int>& fds, std::vector<size_t>& streams) const;
  // Writes a line of the launcher's own into `stream` (console and file) as if the worker had written it:
  // how the worker was placed (CPU binding) is shown as the first line of its log.
  void note(size_t stream, const std::string& line);
  // Reads what is available; closes the stream at EOF (and flushes a last unterminated line).
  void on_readable(size_t stream);
  // Reads everything left without blocking, then closes every stream (after the workers are reaped; a
  // grandchild still holding the pipe must not keep the launcher waiting).
  void drain_all();
  // The last kTailLines lines of `rank`'s stderr.
  std::vector<std::string> stderr_tail(int rank) const;

 private:
  struct Stream {
    StreamRoute route;
    int fd = -1;
    int file_fd = -1;
    std::string prefix;
    std::string partial;
    std::deque<std::string> tail;
  };
  void emit_line(Stream& s, const std::string& line, bool newline);
  void close_stream(Stream& s);
  std::vector<Stream> streams_;
};

}  // namespace meshtrain::launch
