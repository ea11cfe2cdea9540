// connect_with_retry on loopback: a port nobody listens on fails once the deadline has passed (not before,
// not long after) with host, port and the reason; a listener that appears while it retries is reached.
#include "meshtrain/core/tcp_connect.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

using namespace meshtrain;
using namespace std::chrono_literals;

namespace {

// A loopback socket bound to a kernel-chosen port and not listening: connecting to it is refused.
struct ClosedPort {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int port = 0;
  ClosedPort() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~ClosedPort() { ::close(fd); }
  void listen() const { EXPECT_EQ(::listen(fd, 4), 0); }
};

}  // namespace

TEST(ConnectWithRetry, AClosedPortFailsAfterTheDeadline) {
  ClosedPort closed;
  const auto t0 = Clock::now();
  try {
    const int fd = connect_with_retry("127.0.0.1", closed.port, t0 + 300ms);
    ::close(fd);
    FAIL() << "connected to a port nobody listens on";
  } catch (const ConnectError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(cat("cannot connect to 127.0.0.1:", closed.port, " within "), 0), 0u)
        << e.what();
    EXPECT_EQ(e.reason(), "Connection refused");
    EXPECT_NE(std::string(e.what()).find(" s: Connection refused"), std::string::npos) << e.what();
  }
  const auto took = Clock::now() - t0;
  EXPECT_GE(took, 300ms);  // it retried until the deadline
  EXPECT_LT(took, 3s);     // and stopped there
}

TEST(ConnectWithRetry, ReachesAListenerThatAppearsWhileItRetries) {
  ClosedPort later;
  std::thread opener([&] {
    std::this_thread::sleep_for(200ms);
    later.listen();
  });
  const auto t0 = Clock::now();
  const int fd = connect_with_retry("127.0.0.1", later.port, t0 + 10s);
  opener.join();
  EXPECT_GE(Clock::now() - t0, 150ms);
  EXPECT_LT(Clock::now() - t0, 5s);
  ASSERT_GE(fd, 0);
  // As documented: non-blocking, TCP_NODELAY, close-on-exec.
  EXPECT_TRUE(::fcntl(fd, F_GETFL) & O_NONBLOCK);
  EXPECT_TRUE(::fcntl(fd, F_GETFD) & FD_CLOEXEC);
  int nodelay = 0;
  socklen_t len = sizeof nodelay;
  ASSERT_EQ(::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len), 0);
  EXPECT_NE(nodelay, 0);
  ::close(fd);
}

TEST(ConnectWithRetry, ADeadlineAlreadyPastStillTriesOnce) {
  ClosedPort open;
  open.listen();
  const int fd = connect_with_retry("127.0.0.1", open.port, Clock::now() - 1s);
  EXPECT_GE(fd, 0);
  ::close(fd);
}
