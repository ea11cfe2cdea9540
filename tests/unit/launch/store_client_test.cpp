// StoreClient against the real c10d::TCPStore server (the one meshrun-store runs), including keys written by
// one side and read by the other, and an unreachable server named in the error.
#include "meshtrain/launch/store_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/launch/rendezvous_host.h"

using namespace meshtrain;
using namespace meshtrain::launch;
using namespace std::chrono_literals;

namespace {

c10::intrusive_ptr<c10d::TCPStore> server() {
  c10d::TCPStoreOptions o;
  o.port = 0;
  o.isServer = true;
  o.waitWorkers = false;
  o.timeout = 30s;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
}

std::string str(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

}  // namespace

TEST(StoreClient, SpeaksTcpStoreProtocol) {
  auto s = server();
  StoreClient c("127.0.0.1", s->getPort(), 10s);
  EXPECT_EQ(c.add("n", 1), 1);
  EXPECT_EQ(c.add("n", 4), 5);
  EXPECT_EQ(c.add("n", 0), 5);
  EXPECT_EQ(s->add("n", 1), 6);  // the same key for a PyTorch client
  c.set("k", std::string("v\0x", 3));
  EXPECT_EQ(str(s->get("k")), std::string("v\0x", 3));
  s->set("from_torch", bytes("hello"));
  EXPECT_EQ(c.get("from_torch"), "hello");
  EXPECT_TRUE(c.check("k"));
  EXPECT_FALSE(c.check("missing"));
  // get() waits for a key that is set later.
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    s->set("late", bytes("here"));
  });
  EXPECT_EQ(c.get("late"), "here");
  later.join();
}

TEST(StoreClient, UnreachableServerIsNamed) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);  // a port nobody listens on: bound, never listening
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  auto t0 = std::chrono::steady_clock::now();
  try {
    StoreClient c("127.0.0.1", port, 500ms);
    FAIL() << "connected to a port nobody listens on";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach the rendezvous store at 127.0.0.1:" + std::to_string(port)),
              std::string::npos)
        << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 450ms);  // it retried until the timeout
  ::close(fd);
}

TEST(RendezvousHost, PortInUseIsNamed) {
  int bound = 0;
  int fd = bind_store_socket(0, true, bound);
  try {
    RendezvousHost h(bound, true, "/bin/true");
    FAIL() << "bound a port already in use";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--master-port " + std::to_string(bound) + " is already in use"),
              std::string::npos);
  }
  ::close(fd);
}
