#!/usr/bin/env python3
"""meshtrain under torchrun: the other half of the torchrun contract (PyTorch scripts under meshrun is
multiproc.launch.gloo_allreduce). torchrun from the PyTorch wheel starts two `meshtrain train` workers on the CPU
backend; they find each other through torchrun's store (MASTER_ADDR/MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE) and
train a tiny model for a few steps.
Usage: torchrun_meshtrain_test.py BIN_DIR SOURCE_DIR PYTHON
"""
import os
import re
import subprocess
import sys
import tempfile

bin_dir, src, python = sys.argv[1:4]
meshtrain = os.path.join(bin_dir, "meshtrain")
if not os.access(meshtrain, os.X_OK):
    sys.exit(f"{meshtrain} is not built (build the meshtrain target)")
work = tempfile.mkdtemp(prefix="meshtrain_torchrun_")
prefix = os.path.join(work, "kjv")
subprocess.run([meshtrain, "prepare", os.path.join(src, "data", "kjv", "kjv-genesis-2kings.txt"), "--out", prefix],
               check=True, stdout=subprocess.DEVNULL)
steps = 3
cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--no-python",
       meshtrain, "train", os.path.join(src, "configs", "quickstart.yaml"),
       f"--set=data.train={prefix}_train.bin", f"--set=data.val={prefix}_val.bin", f"--set=train.steps={steps}",
       "--set=model.n_layer=1", "--set=model.d_model=64", "--set=model.n_head=2", "--set=train.micro_batch_size=2",
       "--set=logging.every=1", "--set=train.eval_every=0", "--set=train.sample_tokens=0", "--set=checkpoint.every=0",
       f"--set=train.out_dir={os.path.join(work, 'run')}"]
env = dict(os.environ)
env.pop("OMP_NUM_THREADS", None)
p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, env=env)
print(p.stdout)
assert p.returncode == 0, f"torchrun exited {p.returncode}"
assert re.search(r"\| world 2 \|", p.stdout), "the trainer did not see a world of 2 ranks"
losses = [float(m) for m in re.findall(r"step\s+\d+/%d \| loss ([0-9.]+)" % steps, p.stdout)]
assert len(losses) >= steps, f"expected {steps} logged steps, got {losses}"
assert all(0 < l < 10 for l in losses), losses
# Both ranks end with the same parameters: their gradients were averaged through the communicator that
# found its peer through torchrun's store.
sums = re.findall(r"\[rank (\d)\] parameter checksum (\w+) after step %d" % steps, p.stdout)
assert sorted(r for r, _ in sums) == ["0", "1"] and len({c for _, c in sums}) == 1, sums
subprocess.run(["rm", "-rf", work])
print(f"torchrun + meshtrain train: {steps} steps on 2 CPU ranks, losses {losses}: ok")
