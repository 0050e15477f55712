"""A bursty neighbour for benchmarks: one thread of matrix multiplies in bursts of 0.3-1.5 s, idle
gaps of 0.3-1.5 s, until killed. Run it beside a measurement to load the CPU the way a shared
machine does: `python bench/neighbour.py &`."""

from __future__ import annotations

import random
import time

import torch

if __name__ == "__main__":
    torch.set_num_threads(1)
    rng = random.Random(0)
    a = torch.randn(512, 512)
    while True:
        end = time.perf_counter() + rng.uniform(0.3, 1.5)
        while time.perf_counter() < end:
            a = torch.tanh(a @ a)
        time.sleep(rng.uniform(0.3, 1.5))
