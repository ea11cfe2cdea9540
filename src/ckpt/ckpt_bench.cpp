#include "meshtrain/ckpt/ckpt_bench.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/clock.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/log.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {
namespace {

// Drops a file's clean pages from the page cache, so the next read comes from the disk (no root needed).
void drop_cache(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  SYS_CHECK(fd, "open ", p.string());
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void drop_tree_cache(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) drop_cache(e.path());
}

double disk_write(const fs::path& p, uint64_t bytes) {
  const size_t chunk = 64u << 20;
  std::vector<char> buf(chunk, 'x');
  const auto t0 = Clock::now();
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  SYS_CHECK(fd, "open ", p.string());
  for (uint64_t done = 0; done < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, bytes - done));
    ssize_t w = ::write(fd, buf.data(), n);
    SYS_CHECK(w, "write ", p.string());
    done += static_cast<uint64_t>(w);
  }
  SYS_CHECK(::fsync(fd), "fsync ", p.string());
  ::close(fd);
  return seconds_since(t0);
}

double disk_read(const fs::path& p, uint64_t bytes) {
  drop_cache(p);
  const size_t chunk = 64u << 20;
  std::vector<char> buf(chunk);
  const auto t0 = Clock::now();
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  SYS_CHECK(fd, "open ", p.string());
  for (uint64_t done = 0; done < bytes;) {
    ssize_t r = ::read(fd, buf.data(), chunk);
    SYS_CHECK(r, "read ", p.string());
    MT_CHECK(r > 0, "short read");
    done += static_cast<uint64_t>(r);
  }
  ::close(fd);
  return seconds_since(t0);
}

// Where a save's time goes, each phase alone over the same tensors: a host copy into fresh pages (what the
// first async save pays), CRC-32C, write() into the page cache, and the fsync that puts it on the disk.
struct Phases {
  double copy = 1e30, crc = 1e30, write = 1e30, fsync = 1e30;
};

void measure_phases(const std::vector<ShardedTensor>& state, const fs::path& p, Phases& ph) {
  auto t0 = Clock::now();
  std::vector<at::Tensor> host;
  for (const auto& s : state) host.push_back(at::empty_like(s.local, s.local.options().device(at::kCPU)).copy_(s.local));
  ph.copy = std::min(ph.copy, seconds_since(t0));
  t0 = Clock::now();
  uint32_t crc = 0;
  for (const auto& h : host) crc = crc32c(h.data_ptr(), static_cast<size_t>(h.numel()) * h.element_size(), crc);
  ph.crc = std::min(ph.crc, seconds_since(t0));
  (void)crc;  // timed only (an out-of-line call: not optimised away)
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  SYS_CHECK(fd, "open ", p.string());
  t0 = Clock::now();
  for (const auto& h : host) {
    const char* c = static_cast<const char*>(h.data_ptr());
    for (size_t n = static_cast<size_t>(h.numel()) * h.element_size(); n > 0;) {
      ssize_t w = ::write(fd, c, n);
      SYS_CHECK(w, "write ", p.string());
      c += w;
      n -= static_cast<size_t>(w);
    }
  }
  ph.write = std::min(ph.write, seconds_since(t0));
  t0 = Clock::now();
  SYS_CHECK(::fsync(fd), "fsync ", p.string());
  ph.fsync = std::min(ph.fsync, seconds_since(t0));
  ::close(fd);
}

}  // namespace

std::vector<CkptBenchRow> run_ckpt_bench(const CkptBenchOptions& o) {
  MT_USER_CHECK(o.tensors > 0 && o.bytes >= static_cast<uint64_t>(o.tensors) * 4, "bench ckpt: --bytes must hold ",
                "at least 4 bytes per tensor");
  const fs::path root = fs::path(o.dir) / log::sprintf("meshtrain_ckpt_bench_%d", static_cast<int>(::getpid()));
  remove_tree(root.string());
  fs::create_directories(root);
  const int64_t per = static_cast<int64_t>(o.bytes / 4 / static_cast<uint64_t>(o.tensors));
  MT_USER_CHECK(o.device == "cpu" || o.device == "cuda", "bench ckpt: --device given '", o.device,
                "'; valid: cpu, cuda");
  const at::Device dev = o.device == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  std::vector<ShardedTensor> state;
  for (int i = 0; i < o.tensors; ++i)
    state.push_back({log::sprintf("model.t%03d", i), {per}, {0}, at::randn({per}).to(dev), true});
  const uint64_t bytes = static_cast<uint64_t>(per) * 4 * static_cast<uint64_t>(o.tensors);

  double w = 1e30, r = 1e30, save = 1e30, blocked = 1e30, async_total = 1e30, load = 1e30, st_read = 1e30;
  Phases ph;
  for (int rep = 0; rep < o.repeats; ++rep) {
    const fs::path raw = root / "disk.bin";
    w = std::min(w, disk_write(raw, bytes));
    r = std::min(r, disk_read(raw, bytes));
    fs::remove(raw);
    measure_phases(state, raw, ph);
    fs::remove(raw);

    const std::string dir = (root / "ckpt").string();
    {
      CheckpointManager m(dir, 1, nullptr);
      auto t0 = Clock::now();
      m.save(2 * rep + 1, state, {});
      save = std::min(save, seconds_since(t0));
      t0 = Clock::now();
      const auto stats = m.save_async(2 * rep + 2, state, {});
      m.wait();
      async_total = std::min(async_total, seconds_since(t0));
      blocked = std::min(blocked, stats.blocked_s);
    }
    std::vector<ShardedTensor> into;
    for (const auto& s : state) into.push_back({s.name, s.global_shape, s.offsets, at::empty_like(s.local), true});
    drop_tree_cache(dir);
    const auto t0 = Clock::now();
    load_into(dir, into);
    load = std::min(load, seconds_since(t0));
    MT_CHECK(at::equal(into.back().local, state.back().local), "bench ckpt: loaded data differs");
    into.clear();
    // What `meshtrain import` reads: every tensor of a safetensors file into fresh memory, cold.
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
    drop_tree_cache(dir);
    const auto t1 = Clock::now();
    const auto read = read_safetensors(files, "bench: read");
    st_read = std::min(st_read, seconds_since(t1));
    MT_CHECK(at::equal(read.at(state.back().name), state.back().local.cpu()), "bench ckpt: read data differs");
    remove_tree(dir);
  }
  remove_tree(root.string());
  const double b = static_cast<double>(bytes);
  auto row = [&](const std::string& what, double s, double disk_s) {
    return CkptBenchRow{what, bytes, s, b / s / 1e9, disk_s > 0 ? disk_s / s : 0};
  };
  return {row("disk write (dd, fsync)", w, 0),   row("disk read (cold)", r, 0),
          row("save (sync, committed)", save, w), row("async save: blocked", blocked, 0),
          row("async save: committed", async_total, w), row("load (cold, CRC)", load, r),
          row("safetensors read (cold)", st_read, r),
          row("phase: host copy (fresh)", ph.copy, 0), row("phase: crc32c", ph.crc, 0),
          row("phase: write (page cache)", ph.write, 0), row("phase: fsync", ph.fsync, 0)};
}

std::string ckpt_bench_table(const std::vector<CkptBenchRow>& rows) {
  std::string out = log::sprintf("%-26s %12s %10s %9s %9s\n", "what", "bytes", "seconds", "GB/s", "vs disk");
  for (const auto& r : rows)
    out += log::sprintf("%-26s %12llu %10.3f %9.2f %9s\n", r.what.c_str(), static_cast<unsigned long long>(r.bytes),
                        r.seconds, r.gbs, r.vs_disk > 0 ? log::sprintf("%.0f%%", 100 * r.vs_disk).c_str() : "-");
  return out;
}

std::string ckpt_bench_json(const std::vector<CkptBenchRow>& rows) {
  auto j = nlohmann::json::array();
  for (const auto& r : rows)
    j.push_back({{"what", r.what}, {"bytes", r.bytes}, {"seconds", r.seconds}, {"gbs", r.gbs}, {"vs_disk", r.vs_disk}});
  return j.dump(1) + "\n";
}

}  // namespace meshtrain::ckpt
