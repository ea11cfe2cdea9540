// ChunkedUpdate: the offloaded optimizer's step when the layout holds the gradients on the device (in the
// compute dtype, accumulated there over the micro-batches: core/gradient_streaming.h's held way). The host
// keeps the fp32 master and the two moments, 12 bytes a parameter, and a few pinned slots instead of a
// gradient buffer per parameter:
//
//   for each chunk (at most `chunk_elements` of one parameter), in order, through the slots round robin:
//     the slot's previous chunk: its host spans done → its slot goes up into that parameter's chunk (upload stream)
//     the gradient chunk → the slot (download stream); the slot's upload has read it → host threads: AdamW on
//       the chunk's master and moments, the new parameter cast to the parameter's dtype into the slot
//   the last chunks go up; the compute stream waits for the upload stream
//
// Downloads, host updates and uploads of different chunks overlap, and under bf16 compute each direction moves
// 2 bytes a parameter (the downloaded way moves 4 down and 4 up). On the CPU the copies are plain and
// synchronous, through the same slots (what the CPU tests run).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <memory>
#include <optional>
#include <vector>

#include "meshtrain/train/host_adamw.h"
#include "meshtrain/train/host_workers.h"

namespace meshtrain::train {

class ChunkedUpdate {
 public:
  struct Target {
    at::Tensor param;                        // the layout's parameter (fp32 or bf16, contiguous); .grad final
    at::Tensor master, exp_avg, exp_avg_sq;  // fp32, contiguous, in host memory
    AdamWScalars scalars;                    // this step's
  };

  // `d2h`, `h2d`: the copy streams when the parameters live on `device` (an accelerator), else empty.
  ChunkedUpdate(c10::Device device, std::optional<c10::Stream> d2h, std::optional<c10::Stream> h2d,
                HostWorkers& workers, int64_t chunk_elements, int slots);
  ~ChunkedUpdate();  // waits for the copies that still use the slots
  ChunkedUpdate(const ChunkedUpdate&) = delete;
  ChunkedUpdate& operator=(const ChunkedUpdate&) = delete;

  // One update of every target; returns when the host work is done and the uploads are queued ahead of the
  // compute stream's next work.
  void run(const std::vector<Target>& targets);
  // Bytes moved by the last run(), each way.
  double downloaded_bytes() const { return down_; }
  double uploaded_bytes() const { return up_; }
  // Host memory of the slots.
  int64_t host_bytes() const;

 private:
  struct Slot;
  struct Chunk {
    const Target* target = nullptr;
    int64_t begin = 0, len = 0;
  };

  // Queues the slot's chunk of gradient down, then its spans on the host threads once its data has landed.
  void start(Slot& slot, const Chunk& chunk);
  // Waits for the slot's spans and queues its chunk up; the slot is free once that copy has run.
  void finish(Slot& slot);

  c10::Device device_;
  std::optional<c10::Stream> d2h_, h2d_;
  HostWorkers& workers_;
  int64_t chunk_elements_;
  std::vector<std::unique_ptr<Slot>> slots_;
  double down_ = 0, up_ = 0;
};

}  // namespace meshtrain::train
