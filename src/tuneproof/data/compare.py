"""Compare batching choices on one set of lengths: the plan statistics, planning time, and (given a
model) the attention FLOPs each plan performs under an attention path, from the FLOP ledger."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuneproof.data.packing import best_fit_decreasing
from tuneproof.data.sampler import BucketBatchSampler
from tuneproof.data.stats import PlanStats, hf_length_grouped_plan, plan_stats, random_plan
from tuneproof.errors import TuneproofError

COMPARE_CHOICES = ("random", "hf-length-grouped", "packing")
FLEX_BLOCK = 128


@dataclass(slots=True)
class SamplerResult:
    name: str
    stats: PlanStats
    plan_seconds: float
    attention: dict[str, float] = field(default_factory=dict)  # performed / intended forward attention FLOPs

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.stats.to_dict(),
            "plan_seconds": self.plan_seconds,
            **({"attention_flops": self.attention} if self.attention else {}),
        }


def _timed(fn: Callable[[], Sequence[np.ndarray]]) -> tuple[Sequence[np.ndarray], float]:
    t0 = time.perf_counter()
    plan = fn()
    return plan, time.perf_counter() - t0


def attention_flops(
    shape: Any, attn: str, batches: Sequence[np.ndarray], lengths: np.ndarray, packed: bool = False
) -> dict[str, float]:
    """Forward attention FLOPs (QK^T + AV, all layers) the plan performs under `attn`, and intended.

    Padded micro-batches: width = the micro-batch's longest member (`tuneproof.flops.attention`).
    Packed rows: one row per batch; sdpa/eager materialise the block-diagonal mask (the full row
    square), flex computes the BlockMask blocks that touch a document, flash varlen the documents."""
    from tuneproof.flops.attention import intended_pairs, performed_pairs

    groups = [(shape.layers[idx[0]].attention, len(idx)) for idx in shape.attention_groups().values()]
    performed = intended = 0.0
    for spec, count in groups:
        per_pair = 2.0 * spec.num_heads * (spec.head_dim + spec.v_head_dim) * count
        for b in batches:
            ls = lengths[b]
            want = sum(intended_pairs(int(n), spec.window) for n in ls)
            if packed:
                got = _packed_pairs(attn, ls, spec.window)
            else:
                got = performed_pairs(attn, int(ls.max()), [int(n) for n in ls], spec.window).pairs
            performed += got * per_pair
            intended += want * per_pair
    return {"performed": performed, "intended": intended}


def _packed_pairs(attn: str, docs: np.ndarray, window: int | None) -> int:
    from tuneproof.flops.attention import intended_pairs

    width = int(docs.sum())
    if attn in ("sdpa", "eager"):
        return width * width
    if attn == "flash_attention_2":
        return sum(intended_pairs(int(n), window) for n in docs)
    # flex: block (qb, kb), kb <= qb, is non-empty iff some document spans both blocks (and, with a
    # window, some pair in it is within the window)
    ends = np.cumsum(docs)
    starts = ends - docs
    nb = -(-width // FLEX_BLOCK)
    b0 = np.arange(nb) * FLEX_BLOCK
    b1 = np.minimum(b0 + FLEX_BLOCK, width) - 1
    first = np.searchsorted(ends, b0, side="right")  # first document overlapping each block
    last = np.searchsorted(starts, b1, side="right") - 1  # last document overlapping each block
    q, k = np.meshgrid(np.arange(nb), np.arange(nb), indexing="ij")
    ok = (k <= q) & (first[q] <= last[k])
    if window is not None:
        ok &= b0[q] - b1[k] <= window - 1
    size = (b1 - b0 + 1).astype(np.int64)
    return int((size[q] * size[k] * ok).sum())


def compare(
    lengths: np.ndarray,
    roots: np.ndarray | None,
    micro_batch: int,
    grad_accum: int,
    choices: tuple[str, ...] = COMPARE_CHOICES,
    sweep: tuple[int, ...] = (),
    shape: Any = None,
    attn: str = "sdpa",
    seed: int = 0,
) -> tuple[list[SamplerResult], list[dict[str, Any]]]:
    """Tightest bucketing vs the chosen baselines, and the bucket-width sweep."""
    unknown = [c for c in choices if c not in COMPARE_CHOICES]
    if unknown:
        raise TuneproofError(
            f"--compare {','.join(unknown)} is not known", "use " + ", ".join(COMPARE_CHOICES)
        )
    capacity = micro_batch * int(lengths.max())
    planners: dict[str, Callable[[], Sequence[np.ndarray]]] = {
        "bucketed": lambda: BucketBatchSampler(lengths, micro_batch, grad_accum, seed=seed).global_plan(),
        "random": lambda: random_plan(lengths.size, micro_batch, seed),
        "hf-length-grouped": lambda: hf_length_grouped_plan(lengths, micro_batch, grad_accum, seed),
        "packing": lambda: _shuffled(best_fit_decreasing(lengths, capacity), seed),
    }
    results = []
    for name in ("bucketed", *choices):
        plan, seconds = _timed(planners[name])
        packed = name == "packing"
        stats = plan_stats(plan, lengths, roots, grad_accum, capacity=capacity if packed else None)
        attn_flops = attention_flops(shape, attn, plan, lengths, packed) if shape is not None else {}
        results.append(SamplerResult(name, stats, seconds, attn_flops))
    rows = []
    for width in sweep:
        if width < 1:
            raise TuneproofError(f"--sweep width {width} must be >= 1", "bucket widths are token counts")
        plan, seconds = _timed(
            lambda w=width: BucketBatchSampler(
                lengths,
                micro_batch,
                grad_accum,  # type: ignore[misc]
                bucket_width=w,
                seed=seed,
            ).global_plan()
        )
        rows.append(
            {
                "bucket_width": width,
                **plan_stats(plan, lengths, roots, grad_accum).to_dict(),
                "plan_seconds": seconds,
            }
        )
    return results, rows


def _shuffled(rows: Sequence[np.ndarray], seed: int) -> Sequence[np.ndarray]:
    perm = np.random.default_rng([seed, 2]).permutation(len(rows))
    return [rows[i] for i in perm]
