// meshrun-store: the rendezvous store helper that node 0's meshrun starts (not meant to be run by hand).
// usage: meshrun-store --fd N --port P   (N: an inherited, already-listening TCP socket bound to P)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "meshtrain/core/error.h"
#include "meshtrain/launch/store_server.h"

int main(int argc, char** argv) {
  int fd = -1, port = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--fd") == 0) fd = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--port") == 0) port = std::atoi(argv[i + 1]);
  }
  if (fd < 0 || port <= 0 || port > 65535) {
    std::fputs("usage: meshrun-store --fd N --port P (started by meshrun; it hosts the rendezvous store)\n",
               stderr);
    return 2;
  }
  try {
    meshtrain::launch::serve_store(fd, port);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
