#include "meshtrain/ckpt/range_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "meshtrain/core/crc32.h"
#include "meshtrain/core/error.h"

namespace meshtrain::ckpt {
namespace {

constexpr uint64_t kAlign = 4096;  // O_DIRECT's offset, length and buffer alignment

struct Piece {
  size_t range;
  uint64_t begin, length;  // within the range
  uint32_t crc = 0;
};

// Every file the ranges name, opened once (and once more with O_DIRECT when asked and the file system
// allows it); closed when the read is over.
class Files {
 public:
  Files(const std::vector<ReadRange>& ranges, bool direct) {
    for (const auto& r : ranges) {
      if (fds_.count(r.path)) continue;
      const int fd = ::open(r.path.c_str(), O_RDONLY | O_CLOEXEC);
      MT_USER_CHECK(fd >= 0, r.path, ": cannot open: ", std::strerror(errno));
      fds_[r.path] = {fd, direct ? ::open(r.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT) : -1};
#if defined(POSIX_FADV_SEQUENTIAL)
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // a larger readahead window for the buffered reads
#endif
    }
  }
  ~Files() {
    for (auto& [path, f] : fds_) {
      ::close(f.first);
      if (f.second >= 0) ::close(f.second);
    }
  }
  Files(const Files&) = delete;
  Files& operator=(const Files&) = delete;

  // The descriptor for a piece: the O_DIRECT one only where offset, length and buffer are all aligned.
  int fd(const std::string& path, uint64_t off, uint64_t n, const void* p) const {
    const auto& f = fds_.at(path);
    const bool aligned = off % kAlign == 0 && n % kAlign == 0 && reinterpret_cast<uintptr_t>(p) % kAlign == 0;
    return aligned && f.second >= 0 ? f.second : f.first;
  }

 private:
  std::map<std::string, std::pair<int, int>> fds_;  // buffered, direct (-1: none)
};

void pread_exact(int fd, char* p, uint64_t n, uint64_t off, const ReadRange& r, std::atomic<uint64_t>& preads) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(off));
    if (got < 0 && errno == EINTR) continue;
    SYS_CHECK(got, "read ", r.path);
    MT_USER_CHECK(got > 0, r.path, ": tensor '", r.what, "' is truncated (the file ends at byte ", off,
                  "): the file is incomplete or damaged");
    preads.fetch_add(1, std::memory_order_relaxed);
    p += got;
    off += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
}

// The pieces of every range, in file order (path, then offset), so that the workers' concurrent requests
// sit next to each other on the disk.
std::vector<Piece> cut(const std::vector<ReadRange>& ranges, uint64_t chunk) {
  std::vector<size_t> order(ranges.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(ranges[a].path, ranges[a].offset) < std::tie(ranges[b].path, ranges[b].offset);
  });
  std::vector<Piece> pieces;
  for (size_t i : order)
    for (uint64_t b = 0; b < ranges[i].length; b += chunk)
      pieces.push_back({i, b, std::min(chunk, ranges[i].length - b)});
  return pieces;
}

uint32_t piece_crc(ReadRange::Checksum c, const void* p, uint64_t n) {
  if (c == ReadRange::Checksum::crc32c) return crc32c(p, n);
  if (c == ReadRange::Checksum::crc32) return crc32(p, n);
  return 0;
}

}  // namespace

ReadOptions ReadOptions::from_env() {
  ReadOptions o;
  if (const char* t = std::getenv("MESHTRAIN_READ_THREADS"); t && *t) o.threads = std::max(1, std::atoi(t));
  if (const char* d = std::getenv("MESHTRAIN_READ_DIRECT"); d && d[0] == '1') o.direct = true;
  return o;
}

ReadStats read_ranges(std::vector<ReadRange>& ranges, const ReadOptions& opts) {
  MT_CHECK(opts.chunk_bytes > 0, "read_ranges: chunk_bytes 0");
  Files files(ranges, opts.direct);
  std::vector<Piece> pieces = cut(ranges, opts.chunk_bytes);
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> preads{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;

  auto work = [&] {
    try {
      while (!failed.load()) {
        const size_t i = next.fetch_add(1);
        if (i >= pieces.size()) break;
        Piece& pc = pieces[i];
        const ReadRange& r = ranges[pc.range];
        char* p = static_cast<char*>(r.dest) + pc.begin;
        const uint64_t off = r.offset + pc.begin;
        pread_exact(files.fd(r.path, off, pc.length, p), p, pc.length, off, r, preads);
        pc.crc = piece_crc(r.checksum, p, pc.length);  // while the bytes are still in this core's cache
        if (opts.progress) opts.progress->add(pc.length);
      }
    } catch (...) {
      std::lock_guard<std::mutex> g(mu);
      if (!error) error = std::current_exception();
      failed = true;
    }
    std::lock_guard<std::mutex> g(mu);
    --running;
    cv.notify_all();
  };

  const int n = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(1, opts.threads)), pieces.size()));
  std::vector<std::thread> workers;
  running = n;
  for (int t = 0; t < n; ++t) workers.emplace_back(work);
  {
    // The calling thread prints progress while the workers read.
    std::unique_lock<std::mutex> lk(mu);
    while (running > 0) {
      const double wait = opts.progress ? opts.progress->poll_s() : 1.0;
      cv.wait_for(lk, std::chrono::duration<double>(wait), [&] { return running == 0; });
      if (opts.progress && running > 0) {
        lk.unlock();
        opts.progress->report();
        lk.lock();
      }
    }
  }
  for (auto& w : workers) w.join();
  if (error) std::rethrow_exception(error);

  // Pieces of a range are in offset order: fold their CRCs into the range's.
  ReadStats stats;
  std::vector<bool> started(ranges.size(), false);
  for (const Piece& pc : pieces) {
    ReadRange& r = ranges[pc.range];
    stats.bytes += pc.length;
    if (!started[pc.range]) r.crc = pc.crc;
    else if (r.checksum == ReadRange::Checksum::crc32c) r.crc = crc32c_combine(r.crc, pc.crc, pc.length);
    else if (r.checksum == ReadRange::Checksum::crc32) r.crc = crc32_combine(r.crc, pc.crc, pc.length);
    started[pc.range] = true;
  }
  for (auto& r : ranges)
    if (r.length == 0) r.crc = 0;
  stats.preads = preads.load();
  return stats;
}

}  // namespace meshtrain::ckpt
