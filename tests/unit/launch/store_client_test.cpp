// The rendezvous store end to end in one process: our server (store_server.h) and relay (store_relay.h) on
// threads, reached by our StoreClient and by PyTorch's own c10d::TCPStore client through the relay, as a
// worker reaches it. Covers the token, the key policy, the binding to the rendezvous address, and the launchers'
// round bookkeeping over it when a node never finishes a round (NodeCoordinator).
#include "meshtrain/launch/store_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/launch/node_coordinator.h"
#include "meshtrain/launch/rendezvous_host.h"
#include "meshtrain/launch/store_peer.h"
#include "meshtrain/launch/store_relay.h"
#include "meshtrain/launch/store_server.h"

using namespace meshtrain;
using namespace meshtrain::launch;
using namespace std::chrono_literals;

namespace {

const std::string kToken = "unit-test-token-0123456789abcdef";

// A store (2 nodes) and node 1's relay, served on detached threads for the rest of the test binary.
struct LiveStore {
  int port = 0, relay_port = 0;
  LiveStore() {
    const int fd = bind_store_socket("127.0.0.1", 0, "--master-addr", port);
    std::thread([fd] { serve_store(StoreServerOptions{fd, kToken, 2}); }).detach();
    StoreRelayOptions r;
    r.listen_fd = bind_store_socket("127.0.0.1", 0, "the relay", relay_port);
    r.upstream_host = "127.0.0.1";
    r.upstream_port = port;
    r.token = kToken;
    r.node = 1;
    std::thread([r] { relay_store(r); }).detach();
  }
};

const LiveStore& live() {
  static LiveStore s;
  return s;
}

StoreCredentials launcher(int node, const std::string& token = kToken) {
  return StoreCredentials{token, PeerRole::Launcher, node};
}

c10::intrusive_ptr<c10d::TCPStore> worker_client() {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(live().relay_port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = 20s;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
}

std::string str(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

}  // namespace

TEST(StoreClient, SpeaksTcpStoreProtocol) {
  StoreClient c("127.0.0.1", live().port, launcher(0), 10s);
  StoreClient other("127.0.0.1", live().port, launcher(1), 10s);
  EXPECT_EQ(c.add("meshrun/n", 1), 1);
  EXPECT_EQ(c.add("meshrun/n", 4), 5);
  EXPECT_EQ(other.add("meshrun/n", 1), 6);  // one key for every launcher
  c.set("meshrun/k", std::string("v\0x", 3));
  EXPECT_EQ(other.get("meshrun/k"), std::string("v\0x", 3));
  EXPECT_TRUE(c.check("meshrun/k"));
  EXPECT_FALSE(c.check("meshrun/missing"));
  // get() waits for a key that is set later.
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    other.set("meshrun/late", "here");
  });
  EXPECT_EQ(c.get("meshrun/late"), "here");
  later.join();
}

// PyTorch's own client, through the relay as a worker: the requests a worker's env:// init and its
// collectives' rendezvous make.
TEST(StoreServer, ServesPyTorchsClientThroughTheRelay) {
  auto a = worker_client();
  auto b = worker_client();
  a->set("/worker/attempt_0/x", bytes("1"));
  EXPECT_EQ(str(b->get("/worker/attempt_0/x")), "1");
  EXPECT_EQ(a->add("cnt", 2), 2);
  EXPECT_EQ(b->add("cnt", 3), 5);
  EXPECT_EQ(str(a->compareSet("cas", bytes(""), bytes("first"))), "first");
  EXPECT_EQ(str(b->compareSet("cas", bytes("nope"), bytes("second"))), "first");
  EXPECT_EQ(str(b->compareSet("cas", bytes("first"), bytes("second"))), "second");
  EXPECT_TRUE(a->check({"cnt", "cas"}));
  EXPECT_FALSE(a->check({"cnt", "absent"}));
  a->append("log", bytes("ab"));
  a->append("log", bytes("cd"));
  EXPECT_EQ(str(b->get("log")), "abcd");
  b->multiSet({"m1", "m2"}, {bytes("x"), bytes("y")});
  auto got = a->multiGet({"m1", "m2"});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(str(got[0]) + str(got[1]), "xy");
  EXPECT_TRUE(a->deleteKey("m1"));
  EXPECT_FALSE(a->check({"m1"}));
  EXPECT_GE(a->getNumKeys(), 5);
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    b->set("late", bytes("now"));
  });
  a->wait({"late"});
  later.join();
  EXPECT_THROW(a->wait({"never"}, 300ms), c10::Error);  // CANCEL_WAIT after the timeout
  a->set("after_cancel", bytes("ok"));                   // the connection still serves
  EXPECT_EQ(str(b->get("after_cancel")), "ok");
}

TEST(StoreServer, RefusesAWrongToken) {
  try {
    StoreClient c("127.0.0.1", live().port, launcher(0, "wrong-token-wrong-token-wrong"), 10s);
    FAIL() << "a wrong token was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("refused this node's token"), std::string::npos) << e.what();
  }
}

TEST(StoreServer, WorkersCannotTouchTheLaunchersKeys) {
  StoreClient worker("127.0.0.1", live().port, StoreCredentials{kToken, PeerRole::Workers, 1}, 10s, 5s);
  worker.set("meshrun/cause/0", "0\t1\tforged");  // refused: the server closes the connection
  EXPECT_THROW(worker.add("meshrun/fail/0", 1), Error);
  StoreClient node0("127.0.0.1", live().port, launcher(0), 10s);
  EXPECT_FALSE(node0.check("meshrun/cause/0"));
  // PyTorch's client through the relay: the same refusal.
  auto w = worker_client();
  EXPECT_THROW(w->add("meshrun/fail/0", 1), c10::Error);  // an ADD waits for its answer: the close is seen
  auto w2 = worker_client();
  w2->set("meshrun/cause/0", bytes("forged"));  // a SET is not answered: refused all the same
  EXPECT_THROW(w2->get("cnt"), c10::Error);
  EXPECT_FALSE(node0.check("meshrun/cause/0"));
  EXPECT_EQ(node0.add("meshrun/fail/0", 0), 0);
}

TEST(StoreServer, ALauncherWritesOnlyItsOwnNodeRecord) {
  StoreClient node1("127.0.0.1", live().port, launcher(1), 10s, 5s);
  node1.set("meshrun/nproc/1", "2");
  EXPECT_EQ(node1.get("meshrun/nproc/1"), "2");
  node1.set("meshrun/nproc/0", "99");  // another node's record: refused
  EXPECT_THROW(node1.check("meshrun/nproc/0"), Error);
  StoreClient again("127.0.0.1", live().port, launcher(1), 10s, 5s);
  again.set("meshrun/end/3/1", "1");
  EXPECT_TRUE(again.check("meshrun/end/3/1"));
  again.set("meshrun/end/3/0", "1");  // another node's "finished the round": refused
  EXPECT_THROW(again.check("meshrun/end/3/0"), Error);
  StoreClient third("127.0.0.1", live().port, launcher(1), 10s, 5s);
  third.set("meshrun/join/3/0", "1");  // another node's "joined the round" (elastic membership): refused
  EXPECT_THROW(third.check("meshrun/join/3/0"), Error);
}

// The store's epoch tells a launcher that lost its store a new one (node 0 replaced) from the one it lost: node 0's
// launcher sets it as it starts, and no other node may.
TEST(StoreServer, OnlyNode0SetsTheStoresEpoch) {
  NodeCoordinator node0("127.0.0.1", live().port, 2, 2, 0, 2, 1000ms, kToken);
  NodeCoordinator node1("127.0.0.1", live().port, 2, 2, 1, 2, 1000ms, kToken);
  const std::string epoch = node1.store_epoch();
  EXPECT_EQ(epoch.size(), 16u);
  StoreClient forger("127.0.0.1", live().port, launcher(1), 10s, 5s);
  forger.set("meshrun/epoch", "forged");  // refused: the connection is closed
  EXPECT_THROW(forger.check("meshrun/epoch"), Error);
  EXPECT_EQ(node1.store_epoch(), epoch);
  NodeCoordinator restarted0("127.0.0.1", live().port, 2, 2, 0, 2, 1000ms, kToken);  // a new node 0: a new epoch
  EXPECT_NE(node1.store_epoch(), epoch);
}

// A launcher that joins a round its node was already in (its earlier launcher lost with the node) learns that the
// round is running: its workers replace the lost ones.
TEST(NodeCoordinator, ALauncherThatJoinsARunningRoundReplacesItsNode) {
  NodeCoordinator node0("127.0.0.1", live().port, 2, 2, 0, 2, 2000ms, kToken);
  NodeCoordinator node1("127.0.0.1", live().port, 2, 2, 1, 2, 2000ms, kToken);
  Membership m0;
  std::thread t([&] { m0 = node0.join(31, nullptr); });
  const Membership m1 = node1.join(31, nullptr);
  t.join();
  EXPECT_FALSE(m0.running);
  EXPECT_FALSE(m1.running);
  NodeCoordinator replaced1("127.0.0.1", live().port, 2, 2, 1, 2, 2000ms, kToken);
  const Membership again = replaced1.join(31, nullptr);
  EXPECT_TRUE(again.running);
  EXPECT_TRUE(again.has(1));
}

// Elastic membership (--nnodes 1:2) over the live store: node 0 alone is a round once the wait for node 1 times
// out; node 1 joining that round afterwards finds it decided without it. A malformed member list is one line.
TEST(NodeCoordinator, AnElasticRoundIsTheNodesThatJoinedBeforeItWasDecided) {
  NodeCoordinator node0("127.0.0.1", live().port, 2, 1, 0, 2, 300ms, kToken);
  const Membership alone = node0.join(11, nullptr);
  EXPECT_EQ(alone.nodes, std::vector<int>{0});
  NodeCoordinator node1("127.0.0.1", live().port, 2, 1, 1, 2, 300ms, kToken);
  const Membership late = node1.join(11, nullptr);
  EXPECT_EQ(late.nodes, std::vector<int>{0});
  EXPECT_FALSE(late.has(1));
  // Node 0 finishes the round it ran alone at once: the round's end counts its members only.
  EXPECT_FALSE(node0.finish(11, nullptr).failed);
  StoreClient forger("127.0.0.1", live().port, launcher(1), 10s, 5s);
  forger.set("meshrun/members/12", "0,7");
  forger.add("meshrun/decide/12", 1);  // decided (by someone else) before node 0 comes
  std::string err;
  try {
    node0.join(12, nullptr);
  } catch (const UserError& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("meshrun/members/12 at the store is '0,7', not ascending node numbers below 2"),
            std::string::npos)
      << err;
}

// A node that never finishes a round (its launcher SIGKILLed with its workers) is named, and nobody waits for
// it to leave: node 0 exits as soon as the nodes that did finish have left (not after leave()'s 30 s).
TEST(NodeCoordinator, NamesTheNodeThatDidNotFinishARoundAndDoesNotWaitForItToLeave) {
  NodeCoordinator node0("127.0.0.1", live().port, 2, 2, 0, 2, 300ms, kToken);  // the live store's job: 2 nodes
  const RoundOutcome out = node0.finish(7, nullptr);  // node 1 never comes
  EXPECT_TRUE(out.failed && out.cause.stop);
  EXPECT_EQ(out.cause.exit_code, 1);
  EXPECT_NE(out.cause.text.find("node 1 did not finish round 7 within 0.3 s (only 1 of 2 did)"), std::string::npos)
      << out.cause.text;
  const auto t0 = std::chrono::steady_clock::now();
  node0.leave(7);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);  // waited for itself only, never for node 1 (was 30 s)
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
    StoreClient c("127.0.0.1", port, launcher(0), 500ms);
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
  int fd = bind_store_socket("127.0.0.1", 0, "--master-addr", bound);
  try {
    RendezvousHost h(RendezvousSpec{true, "127.0.0.1", bound, 1, 0, kToken, "/bin/true"});
    FAIL() << "bound a port already in use";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--master-port " + std::to_string(bound) + " is already in use"),
              std::string::npos);
  }
  ::close(fd);
}

// The store listens on the rendezvous address only: 127.0.0.2 (a loopback address, but not 127.0.0.1) takes
// connections, 127.0.0.1 at the same port does not.
TEST(RendezvousHost, BindsTheRendezvousAddressOnly) {
  int port = 0;
  int fd = bind_store_socket("127.0.0.2", 0, "--master-addr", port);
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  EXPECT_EQ(ntohl(a.sin_addr.s_addr), 0x7F000002u);
  int c = ::socket(AF_INET, SOCK_STREAM, 0);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_NE(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ::close(c);
  ::close(fd);
}

TEST(RendezvousHost, ForeignAddressIsNamed) {
  int port = 0;
  try {
    ::close(bind_store_socket("192.0.2.7", 0, "--master-addr", port));  // TEST-NET-1: never this host's
    FAIL() << "bound an address of another host";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--master-addr 192.0.2.7 is not an address of this host"),
              std::string::npos)
        << e.what();
  }
}

// The relay's owner check (loopback_socket_uid) finds an accepted connection's client socket by both its ends and
// only while it is established: a connection to another port is not it, and once the client has closed, its
// entry (FIN_WAIT, then TIME_WAIT with uid 0) no longer answers — an entry of a closed connection whose port a
// new client reuses once answered as root's for that client.
TEST(StoreRelay, OwnerOfALoopbackConnectionIsFoundByBothEndsWhileEstablished) {
  int port = 0, other_port = 0;
  const int listener = bind_store_socket("127.0.0.1", 0, "the relay", port);
  const int other = bind_store_socket("127.0.0.1", 0, "the relay", other_port);
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const int accepted = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  const std::string peer = socket_peer_name(accepted), local = socket_local_endpoint(accepted);
  EXPECT_EQ(local, "127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(loopback_socket_uid(peer, local), static_cast<long>(::getuid()));
  EXPECT_EQ(loopback_socket_uid(peer, "127.0.0.1:" + std::to_string(other_port)), -1);
  ::close(client);  // the client's end leaves ESTABLISHED at once (FIN_WAIT), whatever the server does next
  EXPECT_EQ(loopback_socket_uid(peer, local), -1);
  ::close(accepted);
  ::close(other);
  ::close(listener);
}
