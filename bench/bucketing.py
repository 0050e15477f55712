"""Bucketing vs its baselines, as numbers from one run (issue: bucketing sampler, packing, sweep).

1. On the shipped synthetic long-tail set (20,000 lengths, micro-batch 2, grad-accum 16): padding of
   tightest bucketing, random pairs, HF LengthGroupedSampler (batch 2, and batch 2x16 as the Trainer
   calls it) and best-fit-decreasing packing; roots per window and length mix against random.
2. Planning time for 10 million lengths (median of 3).
3. Training a tiny model on CPU (forward + backward, no optimizer): useful (non-pad) tokens per
   second with bucketed micro-batches vs random padded ones, same examples, ratio printed.

Run: .venv/bin/python bench/bucketing.py
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Sequence

import numpy as np
import torch

from tuneproof.data import BucketBatchSampler, plan_stats, random_plan, synthetic_lengths
from tuneproof.data.compare import compare
from tuneproof.data.stats import hf_length_grouped_plan

warnings.filterwarnings("ignore")
MB, GA = 2, 16


def padding_and_mixing() -> None:
    lengths, roots = synthetic_lengths()
    results, _ = compare(lengths, roots, MB, GA)
    by = {r.name: r.stats for r in results}
    hf2 = plan_stats(hf_length_grouped_plan(lengths, MB, 1), lengths, roots, GA)
    rand = by["random"]
    print(f"== shipped set: {lengths.size} lengths, micro-batch {MB}, grad-accum {GA}")
    for name, s in [
        ("bucketed (tightest)", by["bucketed"]),
        ("random pairs", rand),
        ("HF LengthGrouped, batch 2", hf2),
        (f"HF LengthGrouped, batch {MB}x{GA} (Trainer)", by["hf-length-grouped"]),
        ("packing (BFD)", by["packing"]),
    ]:
        roots_rel = 100 * s.roots_per_window / rand.roots_per_window
        mix_rel = 100 * s.length_mix / rand.length_mix
        print(
            f"  {name:40s} padding {100 * s.padding_fraction:6.2f} %  "
            f"zero-pad {100 * s.zero_pad_share:5.1f} %  "
            f"roots/window {s.roots_per_window:7.2f} ({roots_rel:5.1f} % of random)  "
            f"length mix {s.length_mix:.3f} ({mix_rel:5.1f} % of random)"
        )
    b = by["bucketed"]
    print(
        f"  check: bucketed padding {100 * b.padding_fraction:.3f} % <= 0.2 %: "
        f"{b.padding_fraction <= 0.002}; "
        f"roots {100 * b.roots_per_window / rand.roots_per_window:.1f} % >= 98 %: "
        f"{b.roots_per_window >= 0.98 * rand.roots_per_window}; length mix "
        f"{100 * b.length_mix / rand.length_mix:.1f} % >= 95 %: {b.length_mix >= 0.95 * rand.length_mix}"
    )


def planning_time() -> None:
    lengths = np.clip(np.random.default_rng(0).lognormal(6.6, 1.1, 10_000_000), 64, 16384).astype(np.int64)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        plan = BucketBatchSampler(lengths, MB, GA, seed=len(times)).global_plan()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(
        f"\n== planning 10,000,000 lengths into {len(plan):,} micro-batches: median {med:.2f} s "
        f"(min {min(times):.2f}, 3 runs); goal < 2 s: {med < 2}"
    )


def training_throughput() -> None:
    from tuneproof.arch import resolve
    from tuneproof.data.collate import PadToLongest
    from tuneproof.measure.model import build_model

    torch.set_num_threads(2)
    model = build_model(resolve("tiny"), "sdpa").train()
    full, _ = synthetic_lengths()
    lengths = np.clip(full[:160] // 4, 32, 2048)  # CPU-sized: the shipped shape, scaled down 4x
    rng = np.random.default_rng(0)
    rows = [{"input_ids": rng.integers(1, 500, n).tolist()} for n in lengths]
    collate = PadToLongest(pad_token_id=0)
    plans = {
        "random": random_plan(lengths.size, MB, 0),
        "bucketed": BucketBatchSampler(lengths, MB, seed=0).global_plan(),
    }

    def run(plan: Sequence[np.ndarray]) -> float:
        t0 = time.perf_counter()
        for b in plan:
            batch = collate([rows[i] for i in b])
            model(**batch).loss.backward()
            model.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    for b in plans["random"][:3]:  # warm-up
        model(**collate([rows[i] for i in b])).loss.backward()
    times: dict[str, list[float]] = {name: [] for name in plans}
    for _ in range(2):  # alternate, so drift hits both equally
        for name, plan in plans.items():
            times[name].append(run(plan))
    useful = float(lengths.sum())
    rates = {name: useful / statistics.median(t) for name, t in times.items()}
    pads = {name: plan_stats(plan, lengths).padding_fraction for name, plan in plans.items()}
    print(
        f"\n== tiny model training on CPU ({lengths.size} examples, lengths {lengths.min()}-{lengths.max()}, "
        f"micro-batch {MB}, forward+backward): useful tokens/s, median of 2 alternating passes"
    )
    for name in plans:
        print(f"  {name:9s} {rates[name]:9.0f} tokens/s  (padding {100 * pads[name]:.1f} %)")
    ratio = rates["bucketed"] / rates["random"]
    print(f"  bucketed / random = {ratio:.2f}x; goal >= 1.3x: {ratio >= 1.3}")


if __name__ == "__main__":
    padding_and_mixing()
    planning_time()
    training_throughput()
