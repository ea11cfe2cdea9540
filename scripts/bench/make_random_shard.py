#!/usr/bin/env python3
"""Writes an llm.c token shard of random tokens (for throughput benchmarks): make_random_shard.py OUT N VOCAB"""
import sys

import numpy as np

out, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
header = np.zeros(256, dtype=np.int32)
header[:3] = (20240520, 1, n)
with open(out, "wb") as f:
    f.write(header.tobytes())
    f.write(np.random.default_rng(0).integers(0, vocab, n, dtype=np.uint16).tobytes())
