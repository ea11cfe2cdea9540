// The multi-node failure cause read back from the store (failure_cause.h): whatever the record says, a
// failed job exits non-zero with one line.
#include "meshtrain/launch/failure_cause.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

using namespace meshtrain::launch;

namespace {

const std::string kKey = "meshrun/cause/0";

void expect_one_line(const std::string& s) {
  EXPECT_FALSE(s.empty());
  for (char c : s) EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) << "control char in: " << s;
}

// The job's end on a node with no failure of its own (another node, or a stranger, wrote the cause).
JobExit remote_only(const std::string& record) {
  return failed_job_exit(parse_failure_cause(kKey, record), std::nullopt, 1);
}

}  // namespace

TEST(FailureCause, OurOwnRecordReadsBack) {
  const FailureCause c = parse_failure_cause(kKey, format_failure_cause(5, false, "rank 3 on node 1: exit code 5"));
  EXPECT_EQ(c.exit_code, 5);
  EXPECT_FALSE(c.stop);
  EXPECT_EQ(c.text, "rank 3 on node 1: exit code 5");
  EXPECT_TRUE(c.problem.empty());
  const JobExit e = failed_job_exit(c, std::nullopt, 2);
  EXPECT_EQ(e.code, 5);
  EXPECT_EQ(e.line, "meshrun: job FAILED after 2 attempt(s): rank 3 on node 1: exit code 5; exiting with 5");
  const FailureCause s = parse_failure_cause(kKey, format_failure_cause(143, true, "node 1's launcher got SIGTERM"));
  EXPECT_TRUE(s.stop);
  EXPECT_EQ(failed_job_exit(s, std::nullopt, 1).line,
            "meshrun: job stopped after 1 attempt(s): node 1's launcher got SIGTERM; exiting with 143");
}

TEST(FailureCause, NoRecordMakesAFailedJobExitZero) {
  // A well-formed record whose code is not a failure's, malformed ones, and control characters: every one
  // ends the job non-zero with one line, a problem naming the key, and no restart.
  const char* records[] = {"0\t0\tI say so",       "-5\t0\tnegative",      "256\t0\tover a byte",
                           "99999999999999999999\t0\thuge", "abc\t0\tnot a number", "5 \t0\tblank after",
                           "\t0\tno code",         "5\t2\tstop flag 2",    "5\t\tempty stop",
                           "5\t0",                 "no tabs at all",       "",
                           "0\t1\tline one\nline two", "0x10\t0\thex"};
  for (const char* r : records) {
    SCOPED_TRACE(std::string("record: ") + r);
    const FailureCause c = parse_failure_cause(kKey, r);
    EXPECT_TRUE(c.stop);
    EXPECT_NE(c.problem.find(kKey), std::string::npos) << c.problem;
    const JobExit e = remote_only(r);
    EXPECT_EQ(e.code, 1);
    expect_one_line(e.line);
    EXPECT_NE(e.line.find("FAILED"), std::string::npos) << e.line;
    EXPECT_NE(e.line.find(kKey), std::string::npos) << e.line;
    EXPECT_NE(e.line.find("exiting with 1"), std::string::npos) << e.line;
  }
}

TEST(FailureCause, TheLocalRootCauseWinsOverTheRecord) {
  // This node's own worker failed with 7 while a stranger's record says 0: the workers decide.
  const JobExit e = failed_job_exit(parse_failure_cause(kKey, "0\t0\tall fine"), 7, 1);
  EXPECT_EQ(e.code, 7);
  EXPECT_NE(e.line.find("exiting with 7"), std::string::npos) << e.line;
  // A signal death (128+N) on this node, and a valid remote code on a node whose workers did not fail.
  EXPECT_EQ(failed_job_exit(parse_failure_cause(kKey, "3\t0\trank 2"), 139, 1).code, 139);
  EXPECT_EQ(remote_only("3\t0\trank 2").code, 3);
  EXPECT_EQ(remote_only("255\t0\trank 2").code, 255);
  // A local code that is not a failure's (cannot come from a worker, but the rule holds) falls back.
  EXPECT_EQ(failed_job_exit(parse_failure_cause(kKey, "0\t0\tx"), 0, 1).code, 1);
  EXPECT_EQ(failed_job_exit(parse_failure_cause(kKey, "4\t0\tx"), 0, 1).code, 4);
}

TEST(FailureCause, LongRecordsAreCutToOneLine) {
  const JobExit e = remote_only("5\t0\t" + std::string(10000, 'x'));
  EXPECT_EQ(e.code, 5);
  EXPECT_LT(e.line.size(), 400u);
  expect_one_line(e.line);
}
