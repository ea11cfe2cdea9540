#include "meshtrain/launch/root_cause.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>

#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::launch;

namespace {

WorkerFailure failure(int rank, int code, std::vector<std::string> tail, std::string error_file = "") {
  WorkerFailure f;
  f.rank = rank;
  f.local_rank = rank;
  f.wait_status = code << 8;  // as waitpid reports exit(code)
  f.stderr_tail = std::move(tail);
  f.error_file = std::move(error_file);
  return f;
}

}  // namespace

TEST(RootCause, APeerThatVanishedIsAConsequence) {
  // Rank 1 cannot read its RNG state and exits 2; rank 0 then dies of a broken pipe. Both are reaped in one
  // pass, rank 0 first: the cause is still rank 1.
  std::vector<WorkerFailure> f = {
      failure(0, 1, {"meshtrain: error: send to rank 1: Broken pipe"}),
      failure(1, 2, {"meshtrain: checkpoint rng_state.1: truncated (12 of 5008 bytes)"})};
  EXPECT_TRUE(failed_because_peer_vanished(f[0]));
  EXPECT_FALSE(failed_because_peer_vanished(f[1]));
  ASSERT_EQ(pick_root_cause(f), 1u);
  std::string s = format_root_cause(f[1], 1, 2, {f[0]});
  EXPECT_NE(s.find("rank       : 1"), std::string::npos) << s;
  EXPECT_NE(s.find("rank 0 also failed (exit code 1): a consequence, its peer vanished"), std::string::npos) << s;
  EXPECT_NE(s.find("meshrun exits with 2"), std::string::npos) << s;
}

TEST(RootCause, FirstInTimeByErrorFileThenLowestRank) {
  auto dir = testing_support::temp_dir("root_cause");
  auto write = [&](const std::string& name, long long ts) {
    std::string p = (dir / name).string();
    std::ofstream(p) << "{\"message\": {\"message\": \"x\", \"extraInfo\": {\"timestamp\": \"" << ts << "\"}}}";
    return p;
  };
  std::vector<WorkerFailure> f = {failure(0, 3, {}, write("e0.json", 1700000050)),
                                  failure(1, 4, {}, write("e1.json", 1700000010))};
  EXPECT_EQ(error_file_timestamp(f[1].error_file), 1700000010);
  EXPECT_EQ(pick_root_cause(f), 1u);
  std::vector<WorkerFailure> no_files = {failure(2, 3, {}), failure(5, 4, {})};
  EXPECT_EQ(pick_root_cause(no_files), 0u);
  std::vector<WorkerFailure> all_vanished = {failure(0, 1, {"Connection reset by peer"}),
                                             failure(1, 1, {"BrokenPipeError: [Errno 32]"})};
  EXPECT_EQ(pick_root_cause(all_vanished), 0u);
}
