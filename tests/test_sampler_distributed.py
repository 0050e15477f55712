"""Two real processes (gloo): disjoint micro-batches, equal step counts, no communication."""

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
