# A plain PyTorch DDP-style script, unchanged from what torchrun runs: env:// init with Gloo, one
# all_reduce of the ranks, checked in closed form. Used to show meshrun honours torchrun's contract.
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
t = torch.tensor([float(rank)])
dist.all_reduce(t)
expected = world * (world - 1) / 2
assert t.item() == expected, (t.item(), expected)
dist.barrier()
print(f"allreduce ok rank={rank} world={world} sum={t.item():g} "
      f"restart={os.environ['TORCHELASTIC_RESTART_COUNT']}", flush=True)
dist.destroy_process_group()
