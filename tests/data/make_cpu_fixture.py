"""Records the CPU trace fixture (run once; cpu_tiny_sdpa.json.gz is checked in).

One full training step (forward, loss, backward) of the embedded tiny Gemma-4-style model, sdpa,
batch 1, width 256, torch 2.13 on CPU, after one warm-up step.
"""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from tuneproof.arch import resolve
from tuneproof.model import build_model

HERE = Path(__file__).parent

if __name__ == "__main__":
    model = build_model(resolve("tiny"), "sdpa")
    ids = torch.randint(0, 500, (1, 256), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        model(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        (HERE / "cpu_tiny_sdpa.json.gz").write_bytes(gzip.compress(path.read_bytes(), mtime=0))
