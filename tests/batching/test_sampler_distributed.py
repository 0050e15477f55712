"""Two real processes (gloo): disjoint micro-batches, equal step counts, the same widths at each step
(the rank-synchronous plan), no communication."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from dist_worker import sampler_worker

pytestmark = pytest.mark.slow  # real processes / a real Trainer: left out of mutation runs


def test_two_ranks_disjoint_equal_and_silent(tmp_path: Path) -> None:
    mp.spawn(sampler_worker, args=(2, str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (json.loads((tmp_path / f"rank{k}.json").read_text()) for k in (0, 1))
    assert (r0["num_replicas"], r0["rank"], r1["rank"]) == (2, 0, 1)
    assert len(r0["batches"]) == len(r1["batches"]) > 0
    seen0 = {i for b in r0["batches"] for i in b}
    seen1 = {i for b in r1["batches"] for i in b}
    assert not seen0 & seen1
    assert seen0 | seen1 == set(range(5000))
    gaps = [abs(a - b) for a, b in zip(r0["widths"], r1["widths"], strict=True)]
    assert max(gaps) <= 8  # neighbours in length order: at most one width step (8 tokens) apart
    assert sum(g == 0 for g in gaps) >= 0.8 * len(gaps)  # and mostly the very same width
