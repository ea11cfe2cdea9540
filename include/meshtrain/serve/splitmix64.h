// splitmix64's finaliser: every input bit reaches every output bit. The serve room uses it wherever it needs a
// cheap, well-spread 64-bit mix: the prefix index's keys (block_pool.cpp) and the sampler's per-(seed, token
// index) uniforms (engine/sampler.cpp), so that nearby inputs land far apart.
#pragma once

#include <cstdint>

namespace meshtrain::serve {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace meshtrain::serve
