// Multi-process checkpoint worker (tests/multiproc/ckpt.cmake, crash_test.py): one process per rank under
// meshrun (CPU backend), holding the blocks of tests/multiproc/ckpt/layouts.h that its rank of LAYOUT holds.
//   ckpt_worker save DIR LAYOUT STEP [STEP...]   save each step (async; the next save waits for the previous)
//   ckpt_worker load DIR LAYOUT [EXPECT_STEP]    load `latest` into this rank's blocks and compare with the
//                                                global tensors; prints "rank R loaded step N"; loading
//                                                into the layout that saved, a rank must read exactly the
//                                                bytes of its own blocks (LoadedCheckpoint::bytes_read)
// The world size must be the layout's. Exit 1 on any mismatch, 2 on a user error (with its one line).
#include <ATen/ATen.h>

#include <cstdio>
#include <string>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/comm/cpu_communicator.h"
#include "meshtrain/comm/store.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "multiproc/ckpt/layouts.h"

using namespace meshtrain;

namespace {

int run(int argc, char** argv) {
  MT_USER_CHECK(argc >= 4, "usage: ckpt_worker save|load DIR LAYOUT [STEP...]");
  const std::string mode = argv[1], dir = argv[2];
  const auto& layout = ckpt_test::layout_named(argv[3]);
  const auto world = comm::world_info_from_env();
  MT_USER_CHECK(world.world_size == layout.world, "layout ", layout.name, " needs ", layout.world,
                " ranks, WORLD_SIZE is ", world.world_size);
  if (mode == "save") {
    const auto timeout = std::chrono::seconds(60);
    comm::CommPtr c;
    if (world.world_size > 1)
      c = comm::make_cpu_communicator(comm::connect_store_from_env(timeout), world.rank, world.world_size, "ckpt_test",
                                      timeout);
    ckpt::CheckpointManager m(dir, 2, c);
    auto view = ckpt_test::rank_view(layout, world.rank, /*zeros=*/false);
    for (int i = 4; i < argc; ++i) {
      const int64_t step = std::stoll(argv[i]);
      auto stats = m.save_async(step, view, {{}, {{"layout", layout.name}, {"world_size", layout.world}}, {}});
      std::printf("rank %d saving step %lld: blocked %.3fs\n", world.rank, static_cast<long long>(step),
                  stats.blocked_s);
    }
    m.wait();
    std::printf("rank %d saved\n", world.rank);
    return 0;
  }
  MT_USER_CHECK(mode == "load", "mode must be save or load, got ", mode);
  log::init({.rank = world.rank});  // progress lines: rank 0 only
  auto view = ckpt_test::rank_view(layout, world.rank, /*zeros=*/true);
  auto loaded = ckpt::load_into(dir, view);
  const std::string err = ckpt_test::check_rank_view(view);
  if (!err.empty()) {
    std::fprintf(stderr, "rank %d: %s after loading %s\n", world.rank, err.c_str(), loaded.path.c_str());
    return 1;
  }
  if (argc >= 5 && loaded.meta.step != std::stoll(argv[4])) {
    std::fprintf(stderr, "rank %d: loaded step %lld, expected %s\n", world.rank,
                 static_cast<long long>(loaded.meta.step), argv[4]);
    return 1;
  }
  uint64_t own = 0;
  for (const auto& s : view) own += static_cast<uint64_t>(s.local.numel()) * s.local.element_size();
  if (loaded.meta.mesh.value("layout", "") == layout.name && loaded.bytes_read != own) {
    std::fprintf(stderr, "rank %d: read %llu bytes, its own blocks are %llu\n", world.rank,
                 static_cast<unsigned long long>(loaded.bytes_read), static_cast<unsigned long long>(own));
    return 1;
  }
  std::printf("rank %d loaded step %lld (saved by %s)\n", world.rank, static_cast<long long>(loaded.meta.step),
              loaded.meta.mesh.value("layout", "?").c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UserError& e) {
    std::fprintf(stderr, "ckpt_worker: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_worker: fatal: %s\n", e.what());
    return 1;
  }
}
