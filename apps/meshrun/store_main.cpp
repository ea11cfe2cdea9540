// meshrun-store: this node's rendezvous helper that meshrun starts (not meant to be run by hand):
// rendezvous_host.h. The store (node 0) and the workers' relay (every node) run on threads of their own.
// usage: meshrun-store [--store-fd N --nnodes K] [--relay-fd M --upstream HOST --port P --node R]
//                      [--hello-timeout-ms T]
// N, M: inherited, already-listening TCP sockets; the job's token in $MESHRUN_RDZV_TOKEN.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>

#include "meshtrain/core/error.h"
#include "meshtrain/launch/rdzv_token.h"
#include "meshtrain/launch/store_relay.h"
#include "meshtrain/launch/store_server.h"

namespace {

int usage() {
  std::fputs("usage: meshrun-store [--store-fd N --nnodes K] [--relay-fd M --upstream HOST --port P --node R] "
             "(started by meshrun, with the token in MESHRUN_RDZV_TOKEN)\n", stderr);
  return 2;
}

int number(const std::map<std::string, std::string>& a, const std::string& k, int fallback) {
  auto it = a.find(k);
  return it == a.end() ? fallback : std::atoi(it->second.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace meshtrain::launch;
  std::map<std::string, std::string> a;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strncmp(argv[i], "--", 2) != 0) return usage();
    a[argv[i] + 2] = argv[i + 1];
  }
  const char* token = std::getenv(kRdzvTokenEnv);
  const int store_fd = number(a, "store-fd", -1), relay_fd = number(a, "relay-fd", -1);
  if (!token || !*token || (store_fd < 0 && relay_fd < 0) || (relay_fd >= 0 && !a.count("upstream")))
    return usage();
  try {
    std::thread relay;
    if (relay_fd >= 0) {
      StoreRelayOptions r;
      r.listen_fd = relay_fd;
      r.upstream_host = a["upstream"];
      r.upstream_port = number(a, "port", 0);
      r.token = token;
      r.node = number(a, "node", 0);
      if (store_fd < 0) relay_store(r);
      relay = std::thread([r] {
        try {
          relay_store(r);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::_Exit(1);
        }
      });
    }
    StoreServerOptions s;
    s.listen_fd = store_fd;
    s.token = token;
    s.nnodes = number(a, "nnodes", 1);
    s.hello_timeout = std::chrono::milliseconds(number(a, "hello-timeout-ms", 10000));
    s.request_timeout = std::chrono::milliseconds(number(a, "request-timeout-ms", 30000));
    serve_store(s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
