#include "meshtrain/launch/log_router.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "meshtrain/core/error.h"

namespace meshtrain::launch {
namespace {

// A line longer than this is emitted in pieces (progress bars with '\r' and no '\n' must not grow forever).
constexpr size_t kMaxLine = 64 * 1024;

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w == -1) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // a non-blocking console: wait for room rather than drop lines
        ::usleep(1000);
        continue;
      }
      return;  // console gone (EPIPE): the run goes on, the files still get everything
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

LogRouter::~LogRouter() {
  for (Stream& s : streams_) close_stream(s);
}

size_t LogRouter::add(int fd, const StreamRoute& route) {
  Stream s;
  s.route = route;
  s.fd = fd;
  s.prefix = route.prefix.empty() ? "[rank " + std::to_string(route.rank) + "]: " : route.prefix;
  if (!route.file_path.empty()) {
    s.file_fd = ::open(route.file_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    SYS_CHECK(s.file_fd, "open ", route.file_path);
  }
  streams_.push_back(std::move(s));
  return streams_.size() - 1;
}

void LogRouter::poll_fds(std::vector<int>& fds, std::vector<size_t>& streams) const {
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i].fd >= 0) {
      fds.push_back(streams_[i].fd);
      streams.push_back(i);
    }
  }
}

void LogRouter::emit_line(Stream& s, const std::string& line, bool newline) {
  if (s.file_fd >= 0) {
    std::string raw = line + (newline ? "\n" : "");
    write_all(s.file_fd, raw.data(), raw.size());
  }
  if (s.route.console_fd >= 0) {
    std::string out = s.prefix + line + "\n";
    write_all(s.route.console_fd, out.data(), out.size());
  }
  if (s.route.is_stderr) {
    s.tail.push_back(line);
    if (s.tail.size() > kTailLines) s.tail.pop_front();
  }
}

void LogRouter::note(size_t stream, const std::string& line) { emit_line(streams_[stream], line, true); }

void LogRouter::on_readable(size_t idx) {
  Stream& s = streams_[idx];
  if (s.fd < 0) return;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      s.partial.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1)
        emit_line(s, s.partial.substr(start, nl - start), true);
      s.partial.erase(0, start);
      if (s.partial.size() > kMaxLine) {
        emit_line(s, s.partial, false);
        s.partial.clear();
      }
      continue;
    }
    if (n == -1 && errno == EINTR) continue;
    if (n == -1 && errno == EAGAIN) return;
    close_stream(s);  // EOF or error
    return;
  }
}

void LogRouter::close_stream(Stream& s) {
  if (!s.partial.empty()) {
    emit_line(s, s.partial, false);
    s.partial.clear();
  }
  if (s.fd >= 0) ::close(s.fd);
  if (s.file_fd >= 0) ::close(s.file_fd);
  s.fd = s.file_fd = -1;
}

void LogRouter::drain_all() {
  for (size_t i = 0; i < streams_.size(); ++i) {
    on_readable(i);
    close_stream(streams_[i]);
  }
}

std::vector<std::string> LogRouter::stderr_tail(int rank) const {
  for (const Stream& s : streams_)
    if (s.route.is_stderr && s.route.rank == rank) return {s.tail.begin(), s.tail.end()};
  return {};
}

}  // namespace meshtrain::launch
