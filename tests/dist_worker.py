"""Worker for the 2-process sampler test (spawned; must be importable)."""

from __future__ import annotations

import json
from pathlib import Path


def sampler_worker(rank: int, world: int, folder: str) -> None:
    import numpy as np
    import torch.distributed as dist

    from tuneproof.data import BucketBatchSampler

    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world)
    try:

        def forbidden(*args: object, **kwargs: object) -> None:
            raise AssertionError("the sampler must not communicate")

        for name in (
            "all_reduce",
            "all_gather",
            "all_gather_object",
            "broadcast",
            "broadcast_object_list",
            "barrier",
            "send",
            "recv",
            "gather",
            "scatter",
        ):
            setattr(dist, name, forbidden)
        lengths = np.random.default_rng(0).integers(1, 250, 5000) * 8  # ~20 examples per width
        sampler = BucketBatchSampler(
            lengths, micro_batch_size=2, grad_accum=4, seed=11
        )  # world and rank from dist
        sampler.set_epoch(1)
        batches = list(sampler)
        widths = [int(lengths[b].max()) for b in batches]
        out = {"num_replicas": sampler.num_replicas, "rank": sampler.rank, "batches": batches}
        out["widths"] = widths
        Path(folder, f"rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()
