"""Statistics of a batch plan: what padding costs and whether accumulation windows still mix.

For a list of micro-batches (index arrays into `lengths`), in the order they run:
- padding_fraction: pad slots / all slots, each micro-batch padded to its own longest member;
- zero_pad_share: share of micro-batches whose members all have one length (no padding at all,
  which puts global layers back on SDPA's is_causal path);
- roots_per_window: distinct root documents per gradient-accumulation window (grad_accum
  consecutive micro-batches), averaged over windows; None without root ids;
- length_mix: standard deviation of log2(length) over the sequences of a window, averaged over
  windows: how much a window mixes lengths (a length-homogeneous window scores ~0).
`random_plan` gives the baseline these are compared against: a uniform shuffle in micro-batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tuneproof.data.batch_plan import Plan


@dataclass(kw_only=True, frozen=True, slots=True)
class PlanStats:
    num_batches: int
    padding_fraction: float
    zero_pad_share: float
    roots_per_window: float | None
    length_mix: float

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "num_batches": self.num_batches,
            "padding_fraction": self.padding_fraction,
            "zero_pad_share": self.zero_pad_share,
            "roots_per_window": self.roots_per_window,
            "length_mix": self.length_mix,
        }


def plan_stats(
    batches: Sequence[np.ndarray],
    lengths: np.ndarray,
    roots: np.ndarray | None = None,
    grad_accum: int = 1,
    capacity: int | None = None,
) -> PlanStats:
    """Stats of a plan. `capacity`: packed rows of a fixed token capacity (padding = unused capacity)."""
    plan = Plan.from_batches(batches)
    if not len(plan):
        return PlanStats(
            num_batches=0, padding_fraction=0.0, zero_pad_share=0.0, roots_per_window=None, length_mix=0.0
        )
    # per stored micro-batch, then taken in run order (a run may repeat or skip stored ones)
    ro = np.arange(plan.starts.size - 1) if plan.run_order is None else plan.run_order
    starts = plan.starts[:-1]
    stored_ls = lengths[plan.flat]
    mx = np.maximum.reduceat(stored_ls, starts)[ro]
    mn = np.minimum.reduceat(stored_ls, starts)[ro]
    sums = np.add.reduceat(stored_ls, starts)[ro]
    sizes = plan.stored_sizes[ro]
    real = float(sums.sum())
    if capacity is not None:
        slots = float(capacity) * len(plan)
        zero = sums == capacity
    else:
        slots = float((mx * sizes).sum())
        zero = mx == mn
    # the elements in run order, and the accumulation window each falls in
    run_starts = np.concatenate([[0], np.cumsum(sizes)])
    offsets = np.arange(int(run_starts[-1])) - np.repeat(run_starts[:-1], sizes)
    flat = plan.flat[np.repeat(starts[ro], sizes) + offsets]
    ls = lengths[flat]
    window = np.repeat(np.arange(len(plan)) // grad_accum, sizes)
    num_windows = int(window[-1]) + 1
    roots_pw = None
    if roots is not None:
        r = roots[flat].astype(np.int64)
        pairs = window * (int(r.max()) + 1) + r
        roots_pw = float(np.unique(pairs).size / num_windows)
    x = np.log2(ls.astype(np.float64))
    cnt = np.bincount(window, minlength=num_windows)
    s1 = np.bincount(window, weights=x, minlength=num_windows)
    s2 = np.bincount(window, weights=x * x, minlength=num_windows)
    var = np.maximum(s2 / cnt - (s1 / cnt) ** 2, 0.0)
    return PlanStats(
        num_batches=len(plan),
        padding_fraction=1.0 - real / slots if slots else 0.0,
        zero_pad_share=float(zero.mean()),
        roots_per_window=roots_pw,
        length_mix=float(np.sqrt(var).mean()),
    )


def random_plan(n: int, micro_batch_size: int, seed: int = 0) -> Plan:
    """Uniformly shuffled examples in micro-batches: the padding and mixing baseline."""
    return Plan.fixed(np.random.default_rng([seed, 1]).permutation(n), micro_batch_size, drop_last=False)


def hf_length_grouped_plan(
    lengths: np.ndarray, micro_batch_size: int, grad_accum: int, seed: int = 0
) -> Plan:
    """What HF Trainer's group_by_length does: `get_length_grouped_indices` with
    batch_size = train_batch_size * gradient_accumulation_steps, then micro-batches in that order."""
    import torch
    from transformers.trainer_pt_utils import get_length_grouped_indices

    g = torch.Generator().manual_seed(seed)
    order = np.asarray(
        get_length_grouped_indices(lengths.tolist(), micro_batch_size * grad_accum, generator=g)
    )
    return Plan.fixed(order, micro_batch_size, drop_last=False)
