#include "meshtrain/hw/node_checks.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace meshtrain::hw {
namespace {

constexpr double kDefaultSlowdownC = 85;

// "GPU 3: …; GPU 5: …" for the GPUs where `bad` says something, "" when none does.
std::string per_gpu(const std::vector<GpuHealth>& gpus, const std::function<std::string(const GpuHealth&)>& bad) {
  std::string out;
  for (size_t i = 0; i < gpus.size(); ++i)
    if (std::string b = bad(gpus[i]); !b.empty()) out += cat(out.empty() ? "" : "; ", "GPU ", i, ": ", b);
  return out;
}

CheckRow row(std::string check, const std::string& problems, std::string ok_found, std::string expected) {
  return {std::move(check), problems.empty() ? std::move(ok_found) : problems, std::move(expected),
          problems.empty() ? CheckStatus::Pass : CheckStatus::Fail};
}

CheckRow model_row(const std::vector<GpuHealth>& g, const NodeExpectations& want) {
  const std::string& first = g.front().name;
  const std::string bad = per_gpu(g, [&](const GpuHealth& h) {
    if (!want.gpu_model.empty()) return h.name.find(want.gpu_model) == std::string::npos ? h.name : std::string();
    return h.name != first ? h.name : std::string();
  });
  return row("GPU model", bad.empty() ? "" : bad, first, want.gpu_model.empty() ? "all alike" : "*" + want.gpu_model + "*");
}

CheckRow memory_errors_row(const std::vector<GpuHealth>& g) {
  const std::string bad = per_gpu(g, [](const GpuHealth& h) {
    std::vector<std::string> b;
    if (h.ecc_uncorrected_volatile.value_or(0) > 0) b.push_back(cat(*h.ecc_uncorrected_volatile, " uncorrected ECC errors"));
    if (h.retired_pages_pending.value_or(false)) b.push_back("page retirement pending");
    if (h.row_remap_pending.value_or(false)) b.push_back("row remap pending (reset the GPU)");
    if (h.row_remap_failed.value_or(false)) b.push_back("row remap failed");
    std::string out;
    for (const auto& x : b) out += (out.empty() ? "" : ", ") + x;
    return out;
  });
  const bool any = std::any_of(g.begin(), g.end(), [](const GpuHealth& h) {
    return h.ecc_uncorrected_volatile || h.retired_pages_pending || h.row_remap_pending;
  });
  if (!any) return {"ECC / retired pages", "not reported", "none", CheckStatus::Skip};
  return row("ECC / retired pages", bad, "none", "none");
}

CheckRow nvlink_row(const std::vector<GpuHealth>& g, int want) {
  if (std::none_of(g.begin(), g.end(), [](const GpuHealth& h) { return h.nvlinks_up.has_value(); }))
    return {"NVLink links up", "no NVLink", want > 0 ? cat(want, " per GPU") : "-", want > 0 ? CheckStatus::Fail : CheckStatus::Skip};
  int most = 0;
  for (const auto& h : g) most = std::max(most, h.nvlinks_up.value_or(0));
  const int expect = want >= 0 ? want : most;
  const std::string bad = per_gpu(g, [&](const GpuHealth& h) {
    const int up = h.nvlinks_up.value_or(0);
    return up == expect ? std::string() : cat(up, " up, ", h.nvlinks_down.value_or(0), " down");
  });
  return row("NVLink links up", bad, cat(expect, " on each of ", g.size(), " GPUs"), cat(expect, " per GPU"));
}

CheckRow pcie_row(const std::vector<GpuHealth>& g) {
  if (std::none_of(g.begin(), g.end(), [](const GpuHealth& h) { return h.pcie_width && h.pcie_max_width; }))
    return {"PCIe link", "not reported", "full width", CheckStatus::Skip};
  // Width only: the generation drops when a GPU idles (power saving), so it is shown, not judged.
  const std::string bad = per_gpu(g, [](const GpuHealth& h) {
    return h.pcie_width && h.pcie_max_width && *h.pcie_width < *h.pcie_max_width
               ? cat("x", *h.pcie_width, " of x", *h.pcie_max_width)
               : std::string();
  });
  const GpuHealth& f = g.front();
  return row("PCIe link", bad, cat("x", f.pcie_width.value_or(0), " gen ", f.pcie_gen.value_or(0), " (max gen ",
                                   f.pcie_max_gen.value_or(0), ")"),
             "full width");
}

CheckRow clocks_row(const std::vector<GpuHealth>& g) {
  const std::string bad = per_gpu(g, [](const GpuHealth& h) {
    std::string b;
    if (h.power_limit_w && h.default_power_limit_w && *h.power_limit_w < *h.default_power_limit_w - 0.5)
      b = log::sprintf("power limit %.0f W of %.0f W", *h.power_limit_w, *h.default_power_limit_w);
    if (const std::string why = throttle::describe(h.now.throttle_reasons.value_or(0)); !why.empty())
      b += (b.empty() ? "" : ", ") + ("throttled: " + why);
    return b;
  });
  return row("clocks not capped", bad, "no cap, no throttling", "default power limit, no throttling");
}

CheckRow temperature_row(const std::vector<GpuHealth>& g, double margin) {
  double hottest = -1;
  const std::string bad = per_gpu(g, [&](const GpuHealth& h) {
    if (!h.now.temperature_c) return std::string();
    hottest = std::max(hottest, *h.now.temperature_c);
    const double limit = h.slowdown_temperature_c.value_or(kDefaultSlowdownC) - margin;
    return *h.now.temperature_c > limit ? log::sprintf("%.0f °C > %.0f °C", *h.now.temperature_c, limit) : std::string();
  });
  if (hottest < 0) return {"temperature", "not reported", "-", CheckStatus::Skip};
  return row("temperature", bad, log::sprintf("%.0f °C max", hottest), log::sprintf("%.0f °C below slowdown", margin));
}

}  // namespace

std::vector<CheckRow> check_gpus(const GpuSensors& sensors, const NodeExpectations& want) {
  const int n = sensors.count();
  if (n == 0) {
    return {{"GPU count", cat("0 (", sensors.source(), ")"), want.gpus > 0 ? cat(want.gpus) : "-",
             want.gpus > 0 ? CheckStatus::Fail : CheckStatus::Skip}};
  }
  std::vector<GpuHealth> g;
  for (int i = 0; i < n; ++i) g.push_back(sensors.health(i));
  std::vector<CheckRow> rows;
  rows.push_back({"GPU count", cat(n), want.gpus > 0 ? cat("≥ ", want.gpus) : "≥ 1",
                  want.gpus > n ? CheckStatus::Fail : CheckStatus::Pass});
  rows.push_back(model_row(g, want));
  rows.push_back(memory_errors_row(g));
  rows.push_back(nvlink_row(g, want.nvlinks));
  rows.push_back(pcie_row(g));
  rows.push_back(clocks_row(g));
  rows.push_back(temperature_row(g, want.temperature_margin_c));
  return rows;
}

CheckRow check_checkpoint_dir(const std::string& dir, int64_t checkpoint_bytes, double max_write_s, int64_t probe_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return {"checkpoint dir", cat("cannot create ", dir, ": ", ec.message()), "writable", CheckStatus::Fail};
  struct statvfs vfs {};
  SYS_CHECK(::statvfs(dir.c_str(), &vfs), "statvfs ", dir);
  const double free_b = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize);
  // The probe: written in 4 MiB pieces and fsynced, as a checkpoint shard is.
  const std::string probe = cat(dir, "/.meshtrain_doctor_probe.", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return {"checkpoint dir", cat("cannot write in ", dir, ": ", std::strerror(errno)), "writable", CheckStatus::Fail};
  std::vector<char> buf(4 << 20, 'm');
  const auto t0 = std::chrono::steady_clock::now();
  int64_t done = 0;
  for (; done < probe_bytes; done += static_cast<int64_t>(buf.size()))
    if (::write(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size())) break;
  ::fsync(fd);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  ::unlink(probe.c_str());
  const double rate = static_cast<double>(done) / std::max(secs, 1e-6);
  const double ckpt = static_cast<double>(checkpoint_bytes), write_s = ckpt / rate;
  std::string bad;
  if (free_b < 2 * ckpt) bad = log::sprintf("%.1f GB free < 2 × %.1f GB; ", free_b / 1e9, ckpt / 1e9);
  if (write_s > max_write_s) bad += log::sprintf("%.0f MB/s: %.0f s per checkpoint; ", rate / 1e6, write_s);
  return row("checkpoint dir", bad.empty() ? "" : bad.substr(0, bad.size() - 2),
             log::sprintf("%.0f MB/s (%.1f s per %.2f GB checkpoint), %.1f GB free", rate / 1e6, write_s, ckpt / 1e9,
                          free_b / 1e9),
             log::sprintf("2 × checkpoint free, ≤ %.0f s to write", max_write_s));
}

BusBandwidth expected_allreduce_busbw(const Topology& topo, int gpus, const std::string& gpu_name) {
  bool clique = gpus > 1 && gpus <= topo.num_gpus();
  for (int i = 0; clique && i < gpus; ++i)
    for (int j = i + 1; j < gpus; ++j) clique = clique && topo.nvlinked(i, j);
  if (!clique) return {15, cat("PCIe between ", gpus, " GPUs")};
  struct Gen {
    const char* name;
    double gbs;
  };
  constexpr Gen kGens[] = {{"B200", 700}, {"H200", 360}, {"H100", 360}, {"H800", 360}, {"A100", 230}, {"A800", 230}, {"V100", 130}};
  for (const Gen& g : kGens)
    if (gpu_name.find(g.name) != std::string::npos) return {g.gbs, cat("NVLink, ", gpus, "× ", g.name)};
  return {100, cat("NVLink, ", gpus, " GPUs of an unlisted model")};
}

CheckRow check_allreduce_busbw(double measured_gbs, const BusBandwidth& expected) {
  const double floor = 0.75 * expected.gbs;
  return {"all-reduce bus bandwidth", log::sprintf("%.1f GB/s", measured_gbs),
          log::sprintf("≥ %.0f GB/s (75 %% of %.0f, %s)", floor, expected.gbs, expected.why.c_str()),
          measured_gbs >= floor ? CheckStatus::Pass : CheckStatus::Fail};
}

std::string format_check_table(const std::vector<CheckRow>& rows) {
  size_t w0 = 5, w1 = 5;
  for (const auto& r : rows) w0 = std::max(w0, r.check.size()), w1 = std::max(w1, r.found.size());
  auto status = [](CheckStatus s) { return s == CheckStatus::Pass ? "ok" : s == CheckStatus::Fail ? "FAIL" : "skip"; };
  std::string out = log::sprintf("%-4s  %-*s  %-*s  %s\n", "", static_cast<int>(w0), "check", static_cast<int>(w1), "found", "expected");
  const CheckRow* failed = nullptr;
  for (const auto& r : rows) {
    out += log::sprintf("%-4s  %-*s  %-*s  %s\n", status(r.status), static_cast<int>(w0), r.check.c_str(),
                        static_cast<int>(w1), r.found.c_str(), r.expected.c_str());
    if (!failed && r.status == CheckStatus::Fail) failed = &r;
  }
  if (failed) out += cat("FAILED: ", failed->check, ": found ", failed->found, "; expected ", failed->expected, "\n");
  return out;
}

bool all_passed(const std::vector<CheckRow>& rows) {
  return std::none_of(rows.begin(), rows.end(), [](const CheckRow& r) { return r.status == CheckStatus::Fail; });
}

}  // namespace meshtrain::hw
