// FlightRecorder: the ring keeps the newest entries in order, updates reach only live entries, and the dump is
// JSON a reader can parse, written where flight_dump_path says.
#include "comm/diagnostics/flight_recorder.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_support.h"

using meshtrain::comm::FlightRecorder;
using meshtrain::comm::flight_dump_path;
using State = FlightRecorder::State;

namespace {

FlightRecorder::Entry op(const std::string& name, std::uint64_t seq) {
  FlightRecorder::Entry e;
  e.group = "world";
  e.group_rank = 1;
  e.group_size = 4;
  e.seq = seq;
  e.op = name;
  e.dtype = "Float";
  e.numel = 16;
  e.bytes = 64;
  return e;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace

TEST(FlightRecorder, KeepsTheNewestEntriesOldestFirst) {
  FlightRecorder rec(3);
  for (std::uint64_t i = 0; i < 5; ++i) rec.issued(op("all_reduce(sum)", i));
  auto es = rec.entries();
  ASSERT_EQ(es.size(), 3u);
  EXPECT_EQ(es[0].seq, 2u);
  EXPECT_EQ(es[1].seq, 3u);
  EXPECT_EQ(es[2].seq, 4u);
  EXPECT_EQ(es[2].id, 4u);
  EXPECT_EQ(es[0].state, State::Scheduled);
  EXPECT_GT(es[0].issued_us, 0);
}

TEST(FlightRecorder, StatesAndTimesFollowTheOp) {
  FlightRecorder rec(4);
  const auto a = rec.issued(op("all_reduce(sum)", 0));
  const auto b = rec.issued(op("broadcast(root 0)", 1));
  rec.started(a);
  rec.ended(a, State::Completed);
  rec.started(b);
  rec.ended(b, State::TimedOut);
  rec.ended(b, State::Completed);  // a final state is final
  auto es = rec.entries();
  EXPECT_EQ(es[0].state, State::Completed);
  EXPECT_GE(es[0].ended_us, es[0].started_us);
  EXPECT_GE(es[0].started_us, es[0].issued_us);
  EXPECT_EQ(es[1].state, State::TimedOut);
  EXPECT_GT(es[1].ended_us, 0);
}

TEST(FlightRecorder, UpdatesToOverwrittenEntriesAreIgnored) {
  FlightRecorder rec(2);
  const auto old = rec.issued(op("a", 0));
  rec.issued(op("b", 1));
  rec.issued(op("c", 2));  // overwrites slot of `old`
  rec.ended(old, State::Failed);
  auto es = rec.entries();
  ASSERT_EQ(es.size(), 2u);
  EXPECT_EQ(es[0].op, "b");
  EXPECT_EQ(es[0].state, State::Scheduled);
  EXPECT_EQ(es[1].op, "c");
  EXPECT_EQ(es[1].state, State::Scheduled);
  rec.ended(12345, State::Failed);  // never issued: no effect, no crash
}

TEST(FlightRecorder, DumpIsParsableJsonWithEveryField) {
  FlightRecorder rec(8);
  const auto a = rec.issued(op("all_reduce(sum)", 7));
  rec.started(a);
  rec.ended(a, State::TimedOut);
  auto p2p = op("send(to 3)", 2);
  p2p.peer = 3;
  rec.issued(p2p);
  const auto dir = meshtrain::testing_support::temp_dir("flight_dump");
  const std::string path = (dir / "sub" / "f.json").string();
  ASSERT_TRUE(rec.dump(path, 5, "all_reduce(sum) seq 7 timed out"));
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["rank"], 5);
  EXPECT_EQ(j["reason"], "all_reduce(sum) seq 7 timed out");
  ASSERT_EQ(j["entries"].size(), 2u);
  const auto& e = j["entries"][0];
  EXPECT_EQ(e["op"], "all_reduce(sum)");
  EXPECT_EQ(e["group"], "world");
  EXPECT_EQ(e["group_rank"], 1);
  EXPECT_EQ(e["group_size"], 4);
  EXPECT_EQ(e["seq"], 7);
  EXPECT_EQ(e["dtype"], "Float");
  EXPECT_EQ(e["numel"], 16);
  EXPECT_EQ(e["bytes"], 64);
  EXPECT_EQ(e["state"], "timed_out");
  EXPECT_GT(e["started_us"].get<long long>(), 0);
  EXPECT_EQ(j["entries"][1]["peer"], 3);
  EXPECT_EQ(j["entries"][1]["state"], "scheduled");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp" + std::to_string(::getpid())));
}

TEST(FlightRecorder, DumpToAnUnwritablePlaceReportsFalse) {
  FlightRecorder rec(2);
  rec.issued(op("a", 0));
  const auto dir = meshtrain::testing_support::temp_dir("flight_unwritable");
  std::ofstream(dir / "file") << "x";
  EXPECT_FALSE(rec.dump((dir / "file" / "f.json").string(), 0, "r"));  // parent is a file
}

TEST(FlightRecorder, DumpPathOrder) {
  ScopedEnv rank("RANK", "3");
  {
    ScopedEnv a("MESHTRAIN_FLIGHT_DIR", "/x/flight");
    ScopedEnv b("TORCHELASTIC_ERROR_FILE", "/logs/run/attempt_0/3/error.json");
    EXPECT_EQ(flight_dump_path("/run"), "/x/flight/comm_flight_rank3.json");
  }
  {
    ScopedEnv a("MESHTRAIN_FLIGHT_DIR", nullptr);
    ScopedEnv b("TORCHELASTIC_ERROR_FILE", "/logs/run/attempt_0/3/error.json");
    EXPECT_EQ(flight_dump_path("/run"), "/run/comm_flight_rank3.json");
    EXPECT_EQ(flight_dump_path(""), "/logs/run/attempt_0/3/comm_flight_rank3.json");
  }
  {
    ScopedEnv a("MESHTRAIN_FLIGHT_DIR", nullptr);
    ScopedEnv b("TORCHELASTIC_ERROR_FILE", nullptr);
    EXPECT_EQ(flight_dump_path(""),
              (std::filesystem::temp_directory_path() / "comm_flight_rank3.json").string());
  }
}

TEST(FlightRecorder, DumpIfFirstDoesNotOverwriteAnEarlierDump) {
  const auto dir = meshtrain::testing_support::temp_dir("flight_first");
  ScopedEnv d("MESHTRAIN_FLIGHT_DIR", dir.c_str());
  ScopedEnv r("RANK", "0");
  FlightRecorder rec(4);
  rec.issued(op("a", 0));
  const std::string path = rec.dump("own failure");
  ASSERT_EQ(path, (dir / "comm_flight_rank0.json").string());
  EXPECT_EQ(rec.dump_if_first("requested by another rank"), "");
  std::ifstream in(path);
  EXPECT_EQ(nlohmann::json::parse(in)["reason"], "own failure");
}
