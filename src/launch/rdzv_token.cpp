// The job's rendezvous secret (see rdzv_token.h).
#include "meshtrain/launch/rdzv_token.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "meshtrain/core/clock.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/trim.h"

namespace meshtrain::launch {
namespace {

constexpr size_t kMinEnvTokenBytes = 16;  // a short secret is guessable: say so rather than accept it

// Creates `path` holding `token`, mode 0600, without replacing a file that appeared meanwhile (link(2)
// fails on an existing name). False when someone else's file won.
bool create_token_file(const std::string& path, const std::string& token) {
  const std::string tmp = cat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  MT_USER_CHECK(fd != -1, "meshrun: --rdzv-conf token_file=", path, ": cannot create it: ", std::strerror(errno));
  const std::string text = token + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  const bool linked = ok && ::link(tmp.c_str(), path.c_str()) == 0;
  const int err = errno;
  ::unlink(tmp.c_str());
  MT_USER_CHECK(ok, "meshrun: --rdzv-conf token_file=", path, ": cannot write it");
  MT_USER_CHECK(linked || err == EEXIST, "meshrun: --rdzv-conf token_file=", path, ": cannot create it: ",
                std::strerror(err));
  return linked;
}

}  // namespace

std::string make_rdzv_token() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n == -1 && errno == EINTR) continue;
    SYS_CHECK(static_cast<int>(n), "getrandom");
    got += static_cast<size_t>(n);
  }
  static const char hex[] = "0123456789abcdef";
  std::string t;
  for (unsigned char b : bytes) t += {hex[b >> 4], hex[b & 15]};
  return t;
}

std::string read_rdzv_token_file(const std::string& path) {
  const std::string what = cat("meshrun: --rdzv-conf token_file=", path);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  MT_USER_CHECK(fd != -1, what, ": cannot open it: ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  const bool regular = S_ISREG(st.st_mode);
  const bool private_mode = (st.st_mode & 077) == 0;
  char buf[2048];
  ssize_t n = regular && private_mode && st.st_uid == ::getuid() ? ::read(fd, buf, sizeof(buf)) : 0;
  ::close(fd);
  MT_USER_CHECK(regular, what, " is not a regular file");
  MT_USER_CHECK(st.st_uid == ::getuid(), what, " belongs to uid ", st.st_uid, ", not to this user (uid ",
                ::getuid(), "); the token file must be the job user's own");
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
  MT_USER_CHECK(private_mode, what, " has mode ", mode,
                ": group or others may read or write it; make it private (chmod 600)");
  const std::string token = n > 0 ? trim_blanks(std::string(buf, static_cast<size_t>(n))) : "";
  MT_USER_CHECK(!token.empty() && n < static_cast<ssize_t>(sizeof(buf)) / 2, what,
                " must hold one token of 1 to 1024 characters");
  return token;
}

std::string resolve_rdzv_token(const std::string& env_token, const std::string& token_file, int node_rank,
                               int nnodes, std::chrono::milliseconds wait_for_file) {
  if (!env_token.empty()) {
    MT_USER_CHECK(env_token.size() >= kMinEnvTokenBytes && env_token.size() <= 1024, "meshrun: ", kRdzvTokenEnv,
                  " must be 16 to 1024 characters (it is ", env_token.size(), "); e.g. `openssl rand -hex 32`");
    return env_token;
  }
  if (!token_file.empty()) {
    if (node_rank == 0 && ::access(token_file.c_str(), F_OK) != 0) create_token_file(token_file, make_rdzv_token());
    const auto deadline = Clock::now() + wait_for_file;
    while (::access(token_file.c_str(), F_OK) != 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    MT_USER_CHECK(::access(token_file.c_str(), F_OK) == 0, "meshrun: --rdzv-conf token_file=", token_file,
                  " did not appear within ", std::chrono::duration<double>(wait_for_file).count(),
                  " s (node 0 creates it; --rdzv-timeout sets the wait)");
    return read_rdzv_token_file(token_file);
  }
  MT_USER_CHECK(nnodes == 1, "meshrun: a job of ", nnodes, " nodes needs the rendezvous token on every node: set ",
                kRdzvTokenEnv, " (16+ characters, the same everywhere) or --rdzv-conf token_file=PATH (a file only "
                "you can read; node 0 creates it if missing)");
  return make_rdzv_token();
}

}  // namespace meshtrain::launch
