#include "meshtrain/ckpt/gather_strings.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

namespace meshtrain::ckpt {

// The CPU backend moves int32/int64, so the bytes travel as int32 words.
std::vector<std::string> all_gather_strings(comm::Communicator& c, const std::string& mine) {
  const int W = c.size();
  const auto on = at::TensorOptions().device(c.device());
  at::Tensor len = at::full({1}, static_cast<int64_t>(mine.size()), on.dtype(at::kLong));
  at::Tensor lens = at::empty({W}, on.dtype(at::kLong));
  c.all_gather_into(lens, len)->wait();
  lens = lens.cpu();  // after wait(): this thread's stream is ordered after the collective
  int64_t max_len = 0;
  for (int r = 0; r < W; ++r) max_len = std::max(max_len, lens[r].item<int64_t>());
  const int64_t words = (max_len + 3) / 4;
  at::Tensor buf = at::zeros({words}, at::kInt);
  std::memcpy(buf.data_ptr(), mine.data(), mine.size());
  buf = buf.to(c.device());
  at::Tensor all = at::empty({W * words}, on.dtype(at::kInt));
  c.all_gather_into(all, buf)->wait();
  all = all.cpu();
  std::vector<std::string> out(static_cast<size_t>(W));
  const char* base = static_cast<const char*>(all.data_ptr());
  for (int r = 0; r < W; ++r)
    out[static_cast<size_t>(r)].assign(base + r * words * 4, static_cast<size_t>(lens[r].item<int64_t>()));
  return out;
}

}  // namespace meshtrain::ckpt
