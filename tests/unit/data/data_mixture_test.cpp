// Several data.train sources: the deal by weight (exact over every span), its determinism, resume exactness,
// and the mistakes a mixture can make.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "meshtrain/data/data_loader.h"
#include "meshtrain/data/source_mix.h"
#include "meshtrain/data/token_shard.h"
#include "support/test_support.h"

using namespace meshtrain;
using testing_support::temp_dir;
using testing_support::user_error;

namespace {

// A shard of n tokens all equal to `id`: every window it gives names its source by its first token.
std::string uniform_shard(const std::filesystem::path& dir, const std::string& name, size_t n, uint16_t id) {
  const std::string path = (dir / name).string();
  data::write_llmc_shard(path, std::vector<uint16_t>(n, id));
  return path;
}

// Sources a (id 1, 40 windows of 11 tokens), b (id 2, 20 windows) and c (id 3, 5 windows): seq_len 10.
struct ThreeSources {
  std::filesystem::path dir = temp_dir("mixture");
  std::string a = uniform_shard(dir, "a.bin", 401, 1), b = uniform_shard(dir, "b.bin", 201, 2),
              c = uniform_shard(dir, "c.bin", 51, 3);
  data::LoaderOptions options(std::vector<DataSource> sources, int rank = 0, int world = 1) const {
    return {.sources = std::move(sources), .seq_len = 10, .batch_size = 2, .rank = rank, .world_size = world,
            .seed = 7};
  }
};

// Windows per source id (1, 2, 3) in one batch.
std::vector<int64_t> count_sources(const data::Batch& batch) {
  std::vector<int64_t> n(3, 0);
  const auto first = batch.inputs.select(1, 0);
  for (int64_t r = 0; r < first.size(0); ++r) ++n[static_cast<size_t>(first[r].item<int64_t>() - 1)];
  return n;
}

}  // namespace

TEST(SourceMix, EveryPrefixHoldsEachShareWithinOne) {
  const std::vector<double> weights = {0.5, 0.3, 0.15, 0.05};
  data::SourceMix mix(weights);
  std::vector<int64_t> drawn(weights.size(), 0);
  for (int64_t k = 1; k <= 20000; ++k) {
    ++drawn[mix.pick(drawn)];
    for (size_t s = 0; s < weights.size(); ++s)
      ASSERT_LT(std::abs(static_cast<double>(drawn[s]) - static_cast<double>(k) * weights[s]), 1.0)
          << "source " << s << " after " << k;
  }
  // Weights are normalised: 7:3 deals as 0.7:0.3.
  data::SourceMix seven_three({7, 3});
  std::vector<int64_t> d(2, 0);
  for (int i = 0; i < 10; ++i) ++d[seven_three.pick(d)];
  EXPECT_EQ(d, (std::vector<int64_t>{7, 3}));
}

TEST(DataMixture, ProportionsAreExactOverEverySpanOfSteps) {
  ThreeSources f;
  // Weight 0.6 / 0.3 / 0.1 with 2 ranks × 2 windows per micro-batch; c (5 windows) wraps many epochs.
  std::vector<int64_t> total(3, 0);
  std::vector<data::DataLoader> ranks;
  for (int r = 0; r < 2; ++r) ranks.emplace_back(f.options({{f.a, 0.6, true}, {f.b, 0.3, true}, {f.c, 0.1, true}}, r, 2));
  for (int step = 1; step <= 50; ++step) {
    for (auto& loader : ranks) {
      const auto n = count_sources(loader.next());
      for (size_t s = 0; s < 3; ++s) total[s] += n[s];
    }
    const double dealt = 4.0 * step;
    for (size_t s = 0; s < 3; ++s)
      ASSERT_LT(std::abs(static_cast<double>(total[s]) - dealt * std::vector<double>{0.6, 0.3, 0.1}[s]), 1.0)
          << "source " << s << " at step " << step;
    // Every rank keeps the whole job's count, the same on each.
    ASSERT_EQ(ranks[0].windows_drawn(), ranks[1].windows_drawn());
    ASSERT_EQ(ranks[0].windows_drawn(), total);
  }
  EXPECT_EQ(ranks[0].state().sources[2].epoch, 4);  // c: 20 windows drawn = 4 epochs of 5
}

TEST(DataMixture, WithoutWeightsEachSourceGoesByItsWindows) {
  ThreeSources f;
  data::DataLoader loader(f.options({{f.a}, {f.b}, {f.c}}));
  std::vector<int64_t> total(3, 0);
  for (int i = 0; i < 65 / 2; ++i) {
    const auto n = count_sources(loader.next());
    for (size_t s = 0; s < 3; ++s) total[s] += n[s];
  }
  // 64 of the 65 windows (40 : 20 : 5) dealt: each source within one of its share.
  EXPECT_NEAR(total[0], 64.0 * 40 / 65, 1.0);
  EXPECT_NEAR(total[1], 64.0 * 20 / 65, 1.0);
  EXPECT_NEAR(total[2], 64.0 * 5 / 65, 1.0);
}

TEST(DataMixture, DeterministicAndEachSourceSeesEveryWindowPerEpoch) {
  ThreeSources f;
  // Distinct windows per source: a of iota tokens, so a window's first token says which window it was.
  std::vector<uint16_t> iota(401);
  for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<uint16_t>(100 + i);
  data::write_llmc_shard(f.a, iota);
  const auto opts = f.options({{f.a, 0.8, true}, {f.b, 0.2, true}});
  data::DataLoader x(opts), y(opts);
  std::set<int64_t> seen;
  for (int i = 0; i < 25; ++i) {  // 50 windows: 40 of a = exactly its first epoch
    const auto bx = x.next(), by = y.next();
    ASSERT_TRUE(at::equal(bx.inputs, by.inputs)) << i;
    for (int64_t r = 0; r < 2; ++r)
      if (const int64_t t = bx.inputs[r][0].item<int64_t>(); t >= 100) {
        EXPECT_TRUE(seen.insert(t).second) << t;
      }
  }
  EXPECT_EQ(seen.size(), 40u);
  EXPECT_EQ(x.state().sources[0], (data::SourcePosition{1, 0}));
  // Another seed: another order.
  auto other = opts;
  other.seed = 8;
  data::DataLoader z(opts), w(other);
  bool differs = false;
  for (int i = 0; i < 5; ++i) differs |= !at::equal(z.next().inputs, w.next().inputs);
  EXPECT_TRUE(differs);
}

TEST(DataMixture, RestoreContinuesExactlyAsAnUninterruptedRun) {
  ThreeSources f;
  const auto opts = f.options({{f.a, 0.5, true}, {f.b, 0.25, true}, {f.c, 0.25, true}}, 1, 2);
  data::DataLoader a(opts);
  for (int i = 0; i < 13; ++i) a.next();  // c has wrapped (13 × 4 / 4 = 13 of its 5 windows)
  const data::LoaderState saved = a.state();
  ASSERT_EQ(saved.sources.size(), 3u);
  EXPECT_EQ(saved.cursor, 52);
  EXPECT_GE(saved.sources[2].epoch, 2);
  std::vector<at::Tensor> expect;
  for (int i = 0; i < 30; ++i) expect.push_back(a.next().inputs);
  data::DataLoader b(opts);
  b.restore(saved);
  EXPECT_EQ(b.windows_drawn(), (std::vector<int64_t>{26, 13, 13}));
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(at::equal(b.next().inputs, expect[i])) << i;
  EXPECT_EQ(b.state(), a.state());
  b.reset();
  data::DataLoader fresh(opts);
  EXPECT_TRUE(at::equal(b.next().inputs, fresh.next().inputs));
}

TEST(DataMixture, MismatchedOrEmptySourcesAreClearErrors) {
  ThreeSources f;
  data::DataLoader two(f.options({{f.a, 1, true}, {f.b, 1, true}}));
  // A one-source position into a mixture, and a mixture's that does not add up.
  auto msg = user_error([&] { two.restore({0, 4}); });
  EXPECT_NE(msg.find("data.train: the saved data position holds 0 sources' positions, data.train has 2"),
            std::string::npos) << msg;
  msg = user_error([&] { two.restore({0, 4, {{0, 1}, {0, 1}}}); });
  EXPECT_NE(msg.find("add up to 2 windows, the saved stream to 4"), std::string::npos) << msg;
  msg = user_error([&] { two.restore({0, 40, {{0, 40}, {0, 0}}}); });
  EXPECT_NE(msg.find("(epoch 0, cursor 40) does not fit its 40 windows"), std::string::npos) << msg;
  data::DataLoader one(f.options({{f.a}}));
  msg = user_error([&] { one.restore({0, 4, {{0, 2}, {0, 2}}}); });
  EXPECT_NE(msg.find("holds 2 sources' positions, data.train has 1"), std::string::npos) << msg;
  // A source with no window of seq_len + 1 tokens.
  const std::string tiny = uniform_shard(f.dir, "tiny.bin", 8, 4);
  msg = user_error([&] { data::DataLoader(f.options({{f.a, 1, true}, {tiny, 1, true}})); });
  EXPECT_NE(msg.find("data.train: '" + tiny + "' holds 0 windows of 11 tokens; each source of a mixture needs"),
            std::string::npos) << msg;
}
