"""What the checkpoint end-to-end tests share (imported from this folder): the binaries, the quickstart config,
a fresh work directory with the King James text as byte-level shards, and the per-rank parameter checksums that
the trainer logs at the end of a run."""
import os
import re
import subprocess
import tempfile


def kjv_setup(bin_dir, src, name):
    """(meshrun, meshtrain, quickstart config, work dir, shard prefix) for a test called `name`."""
    meshrun, meshtrain = os.path.join(bin_dir, "meshrun"), os.path.join(bin_dir, "meshtrain")
    config = os.path.join(src, "configs", "quickstart.yaml")
    work = tempfile.mkdtemp(prefix=f"meshtrain_{name}_")
    prefix = os.path.join(work, "kjv")
    subprocess.run([meshtrain, "prepare", os.path.join(src, "data", "kjv", "kjv-genesis-2kings.txt"), "--out",
                    prefix], check=True, stdout=subprocess.DEVNULL)
    return meshrun, meshtrain, config, work, prefix


def rank_checksums(log):
    """Sorted (rank, checksum, step) of every `[rank R]: … parameter checksum C after step S` line in `log`."""
    return sorted(set(re.findall(r"\[rank (\d+)\].*parameter checksum ([0-9a-f]{8}) after step (\d+)", log)))
