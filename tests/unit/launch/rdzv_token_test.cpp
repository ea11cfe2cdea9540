// The job's store token: where it comes from, and the token file's rules (private to its user, one token).
#include "meshtrain/launch/rdzv_token.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "meshtrain/core/error.h"
#include "meshtrain/launch/launch_options.h"

using namespace meshtrain;
using namespace meshtrain::launch;
using namespace std::chrono_literals;

namespace {

std::string token_temp_dir() {
  char tmpl[] = "/tmp/rdzv-token-test-XXXXXX";
  return ::mkdtemp(tmpl);
}

std::string token_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(RdzvToken, RandomTokensDiffer) {
  const std::string a = make_rdzv_token(), b = make_rdzv_token();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
}

TEST(RdzvToken, EnvironmentWinsAndMustBeLongEnough) {
  EXPECT_EQ(resolve_rdzv_token("0123456789abcdef0", "", 1, 2, 1s), "0123456789abcdef0");
  EXPECT_NE(token_error([] { resolve_rdzv_token("short", "", 1, 2, 1s); }).find("MESHRUN_RDZV_TOKEN must be 16"),
            std::string::npos);
}

TEST(RdzvToken, SeveralNodesNeedOne) {
  EXPECT_EQ(resolve_rdzv_token("", "", 0, 1, 1s).size(), 64u);  // a single node makes its own
  const std::string e = token_error([] { resolve_rdzv_token("", "", 0, 2, 1s); });
  EXPECT_NE(e.find("a job of 2 nodes needs the rendezvous token"), std::string::npos) << e;
}

TEST(RdzvToken, NodeZeroCreatesThePrivateFileTheOthersRead) {
  const std::string path = token_temp_dir() + "/token";
  const std::string t0 = resolve_rdzv_token("", path, 0, 2, 1s);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(resolve_rdzv_token("", path, 1, 2, 1s), t0);
  EXPECT_EQ(resolve_rdzv_token("", path, 0, 2, 1s), t0);  // node 0 again (a restart): the file is kept
  ::chmod(path.c_str(), 0644);
  EXPECT_NE(token_error([&] { read_rdzv_token_file(path); })
                .find("token_file=" + path + " has mode 644: group or others may read or write it"),
            std::string::npos);
}

TEST(RdzvToken, OtherNodesWaitForTheFileThenGiveUpInOneLine) {
  const std::string path = token_temp_dir() + "/never";
  EXPECT_NE(token_error([&] { resolve_rdzv_token("", path, 1, 2, 300ms); }).find("did not appear within 0.3 s"),
            std::string::npos);
}

TEST(RdzvToken, TokenFileIsAnRdzvConfKey) {
  LaunchOptions o = parse_launch_options({"--rdzv-conf", "token_file=/x/y,join_timeout=5", "a.py"},
                                         [](const std::string&) { return std::optional<std::string>(); });
  EXPECT_EQ(o.rdzv_token_file, "/x/y");
  EXPECT_DOUBLE_EQ(o.rdzv_timeout, 5);
}
