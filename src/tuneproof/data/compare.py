"""Compare batching choices on one set of lengths: the plan statistics, planning time, and (given a
model) the attention FLOPs each plan performs under an attention path, from the path table."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuneproof.core import validate

if TYPE_CHECKING:  # the planners load in the functions: the CLI reads COMPARE_CHOICES for its help text
    import numpy as np

    from tuneproof.data.stats import PlanStats

COMPARE_CHOICES = ("random", "hf-length-grouped", "packing")
PLAN_SAMPLERS = ("ours", *COMPARE_CHOICES)  # what `tuneproof plan` projects (ours: BucketBatchSampler)

# docs/reference-run.md's fit of its step time: (A, B) of t = A*w + B*w^2 seconds per sequence;
# the default step cost of `buckets --ranks`, and the example `plan --fit` names
CASE_FIT = (6.87e-4, 8.85e-8)
CASE_FIT_TEXT = ",".join(f"{x:.2e}".replace("e-0", "e-") for x in CASE_FIT)  # as a --fit value: "6.87e-4,..."


def case_cost() -> Any:
    from tuneproof.data.ranks import StepCost

    return StepCost(a=CASE_FIT[0], b=CASE_FIT[1])


@dataclass(kw_only=True, slots=True)
class SamplerResult:
    name: str
    stats: PlanStats
    plan_seconds: float
    attention: dict[str, float] = field(default_factory=dict)  # performed / intended forward attention FLOPs
    ranks: Any = None  # RankUse: utilisation across ranks, with several ranks

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.stats.to_dict(),
            "plan_seconds": self.plan_seconds,
            **({"attention_flops": self.attention} if self.attention else {}),
            **({"ranks": self.ranks.to_dict()} if self.ranks is not None else {}),
        }


def _timed(fn: Callable[[], Sequence[np.ndarray]]) -> tuple[Sequence[np.ndarray], float]:
    t0 = time.perf_counter()
    plan = fn()
    return plan, time.perf_counter() - t0


def attention_flops(
    shape: Any, attn: str, batches: Sequence[np.ndarray], lengths: np.ndarray, packed: bool = False
) -> dict[str, float]:
    """Forward attention FLOPs (QK^T + AV, all layers) the plan performs under `attn`, and intended.

    Each micro-batch is costed by the attention path table (`tuneproof.attention.paths`): padded
    micro-batches are rows as wide as their longest member; a packed micro-batch is one row holding
    its documents back to back."""
    from tuneproof.attention.paths import intended_for, path, performed_for
    from tuneproof.runs.step import Rows

    chosen = path(attn)
    groups = [(shape.layers[idx[0]].attention, len(idx)) for idx in shape.attention_groups.values()]
    performed = intended = 0.0
    for b in batches:
        ls = [int(n) for n in lengths[b]]
        rows = Rows(sum(ls), (tuple(ls),)) if packed else Rows.padded(max(ls), ls)
        for spec, count in groups:
            per_pair = 2.0 * spec.num_heads * (spec.head_dim + spec.v_head_dim) * count
            performed += performed_for(chosen, rows, spec).pairs * per_pair
            intended += intended_for(rows, spec) * per_pair
    return {"performed": performed, "intended": intended}


def check_compare_args(
    micro_batch: int,
    grad_accum: int,
    choices: tuple[str, ...],
    sweep: tuple[int, ...],
    attn: str,
    seed: int,
    ranks: int = 1,
) -> None:
    """Every argument of `compare` but the lengths, checked before any lengths are read."""
    from tuneproof.attention.paths import path

    validate.integer("micro_batch", micro_batch, high=1 << 20)
    validate.integer("grad_accum", grad_accum, high=1 << 20)
    validate.integer("seed", seed, low=0, high=2**63 - 1)
    validate.integer("ranks", ranks, high=1 << 16, hint="the number of processes (GPUs)")
    for c in choices:
        validate.choice("choices", c, COMPARE_CHOICES)
    for width in sweep:
        validate.integer("sweep", width, hint="bucket widths are token counts")
    path(attn)


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
    ranks: int = 1,
    cost: Any = None,
) -> tuple[list[SamplerResult], list[dict[str, Any]]]:
    """Tightest bucketing vs the chosen baselines, and the bucket-width sweep. With `ranks` > 1 every
    plan is the global one dealt to the ranks (ours rank-synchronous, and its interleaved variant
    beside it), its windows are whole optimizer steps (grad_accum x ranks micro-batches), and `cost`
    (a `StepCost`, default the reference run's fit) gives each plan's utilisation across ranks."""
    from tuneproof.data.ranks import check_fills_one_step

    check_compare_args(micro_batch, grad_accum, choices, sweep, attn, seed, ranks)
    check_fills_one_step(int(lengths.size), micro_batch, grad_accum, ranks)  # else padding of repeats
    return _compare(lengths, roots, micro_batch, grad_accum, choices, sweep, shape, attn, seed, ranks, cost)


def _compare(
    lengths: np.ndarray, roots: np.ndarray | None, micro_batch: int, grad_accum: int,
    choices: tuple[str, ...], sweep: tuple[int, ...], shape: Any, attn: str, seed: int, ranks: int, cost: Any,
) -> tuple[list[SamplerResult], list[dict[str, Any]]]:  # fmt: skip
    """`compare` on arguments already checked."""
    from tuneproof.data.packing import PackedBatchSampler, best_fit_decreasing
    from tuneproof.data.ranks import rank_utilisation
    from tuneproof.data.sampler import BucketBatchSampler
    from tuneproof.data.stats import hf_length_grouped_plan, plan_stats, random_plan

    capacity = micro_batch * int(lengths.max())

    def bucketed(rank_plan: str) -> Sequence[np.ndarray]:
        return BucketBatchSampler(lengths, micro_batch, grad_accum, seed=seed, num_replicas=ranks, rank=0,
                                  rank_plan=rank_plan).global_plan()  # fmt: skip

    planners: dict[str, Callable[[], Sequence[np.ndarray]]] = {
        "bucketed": lambda: bucketed("synchronous"),
        "bucketed (interleaved)": lambda: bucketed("interleaved"),
        "random": lambda: random_plan(lengths.size, micro_batch, seed),
        "hf-length-grouped": lambda: hf_length_grouped_plan(lengths, micro_batch, grad_accum, seed),
        "packing": lambda: (
            _shuffled(best_fit_decreasing(lengths, capacity), seed) if ranks == 1
            else PackedBatchSampler(lengths, capacity, seed=seed, num_replicas=ranks, rank=0).global_plan()
        ),
    }  # fmt: skip
    names = ("bucketed", *(("bucketed (interleaved)",) if ranks > 1 else ()), *choices)
    window = grad_accum * ranks  # one optimizer step: what the gradient averages over
    step_cost = cost if cost is not None else case_cost()
    results = []
    for name in names:
        plan, seconds = _timed(planners[name])
        packed = name == "packing"
        stats = plan_stats(plan, lengths, roots, window, capacity=capacity if packed else None)
        attn_flops = attention_flops(shape, attn, plan, lengths, packed) if shape is not None else {}
        use = None
        if ranks > 1:
            use = rank_utilisation(plan, lengths, ranks, grad_accum, step_cost,
                                   capacity=capacity if packed else None)  # fmt: skip
        results.append(
            SamplerResult(name=name, stats=stats, plan_seconds=seconds, attention=attn_flops, ranks=use)
        )
    rows = []
    for width in sweep:
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
    import numpy as np

    perm = np.random.default_rng([seed, 2]).permutation(len(rows))
    return [rows[i] for i in perm]


# ---- the front door: `tuneproof buckets` ---------------------------------------------------------
