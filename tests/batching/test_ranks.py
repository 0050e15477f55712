"""Rank utilisation: the straggler arithmetic by hand, the CASE's fit on the shipped length set (the
interleaved plan wastes most of 8 ranks, the rank-synchronous default does not), packing too."""

from __future__ import annotations

import numpy as np
import pytest

from tuneproof.core.errors import TuneproofError
from tuneproof.data import BucketBatchSampler, PackedBatchSampler, synthetic_lengths
from tuneproof.data.ranks import StepCost, micro_batch_seconds, rank_utilisation, use_of
from tuneproof.data.stats import plan_stats

CASE_FIT = StepCost(a=6.87e-4, b=8.85e-8)  # docs/reference-run.md, seconds per sequence


def test_utilisation_by_hand() -> None:
    seconds = np.array([1.0, 3.0, 3.0, 1.0])  # rank 0 runs 1 then 3, rank 1 runs 3 then 1
    per_micro = use_of(seconds, 2, 1)
    assert (per_micro.wall_s, per_micro.work_s, per_micro.steps) == (6.0, 8.0, 2)
    assert per_micro.utilisation == pytest.approx(8 / 12)
    per_window = use_of(seconds, 2, 2)  # DDP syncs once per window: 4 and 4, nobody waits
    assert (per_window.wall_s, per_window.steps, per_window.utilisation) == (4.0, 1, 1.0)
    fsdp = use_of(seconds, 2, 2, sync="micro")  # FSDP syncs every micro-batch: waits again
    assert (fsdp.wall_s, fsdp.steps, fsdp.syncs) == (6.0, 1, 2)
    tail = use_of(np.array([1.0, 2.0, 4.0]), 2, 1)  # three for two ranks: the first is repeated
    assert (tail.work_s, tail.wall_s) == (8.0, 6.0)


def test_step_cost_per_sequence_per_batch_and_packed() -> None:
    lengths = np.array([10, 8, 20, 5, 5])
    plan = [np.array([0, 1]), np.array([2]), np.array([3, 4])]
    cost = StepCost(a=1.0, b=0.1, c=2.0, batch=2)  # measured on micro-batches of 2
    got = micro_batch_seconds(plan, lengths, cost)
    expected = [2 + 2 / 2 * (10 + 10), 2 + 1 / 2 * (20 + 40), 2 + 2 / 2 * (5 + 2.5)]
    assert got.tolist() == pytest.approx(expected)
    packed = micro_batch_seconds(plan, lengths, cost, capacity=20)  # each document at its own length
    assert packed[0] == pytest.approx(2 + 0.5 * (10 + 10) + 0.5 * (8 + 6.4))


BAD_FITS = [((-1e-4, 1e-8), "a is -0.0001"), ((1e-4, float("nan")), "b is nan"), ((0.0, 0.0), "both 0")]


@pytest.mark.parametrize(("terms", "needle"), BAD_FITS)
def test_a_bad_fit_is_refused(terms: tuple[float, float], needle: str) -> None:
    with pytest.raises(TuneproofError, match=needle):
        StepCost(a=terms[0], b=terms[1])


def test_the_case_fit_on_the_shipped_lengths_synchronous_beats_interleaved() -> None:
    lengths, roots = synthetic_lengths()
    use = {}
    for rank_plan in ("interleaved", "synchronous"):
        sampler = BucketBatchSampler(lengths, 2, 1, num_replicas=8, rank=0, rank_plan=rank_plan)
        use[rank_plan] = rank_utilisation(sampler.global_plan(), lengths, 8, 1, CASE_FIT).utilisation
        assert plan_stats(sampler.global_plan(), lengths, roots).padding_fraction < 0.002
    assert use["interleaved"] < 0.3  # the straggler: 8 ranks mostly wait
    assert use["synchronous"] >= 0.97


def test_packed_rows_are_split_across_ranks_in_balance() -> None:
    lengths, _ = synthetic_lengths()
    capacity = 2 * int(lengths.max())
    use = {}
    for rank_plan in ("interleaved", "synchronous"):
        samplers = [PackedBatchSampler(lengths, capacity, num_replicas=8, rank=k, rank_plan=rank_plan)
                    for k in range(8)]  # fmt: skip
        plans = [s.plan() for s in samplers]
        assert len({len(p) for p in plans}) == 1
        seen = [int(i) for p in plans for row in p for i in row]
        assert set(seen) == set(range(lengths.size))
        use[rank_plan] = rank_utilisation(samplers[0].global_plan(), lengths, 8, 1, CASE_FIT,
                                          capacity=capacity).utilisation  # fmt: skip
    assert use["synchronous"] > 0.97 > 0.8 > use["interleaved"]
    assert PackedBatchSampler(lengths[:10], capacity, num_replicas=1, rank=0).plan()  # one rank: as before


def test_any_step_cost_callable_works_too() -> None:
    lengths = np.array([10, 10, 30, 30])
    plan = [np.array([0, 1]), np.array([2, 3])]

    def cost(widths: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return rows * np.sqrt(widths)  # any model of a micro-batch's seconds

    use = rank_utilisation(plan, lengths, 2, 1, cost)
    assert use.work_s == pytest.approx(2 * np.sqrt(10) + 2 * np.sqrt(30))
    assert use.wall_s == pytest.approx(2 * np.sqrt(30)) and use.steps == 1


def test_the_run_use_records_how_it_was_dealt_and_one_micro_batch_is_dealt_to_every_rank() -> None:
    use = use_of(np.array([1.0, 3.0, 3.0, 1.0]), 2, 2, sync="micro")
    assert (use.ranks, use.grad_accum, use.sync) == (2, 2, "micro")
    single = use_of(np.array([2.0]), 2, 1)  # one micro-batch for two ranks: repeated on the second
    assert (single.work_s, single.wall_s, single.steps) == (4.0, 2.0, 1)
    from tuneproof.data.ranks import RankUse

    assert use_of(np.zeros(0), 2, 1) == RankUse(
        ranks=2, grad_accum=1, sync="step", steps=0, syncs=0, work_s=0.0, wall_s=0.0
    )  # nothing planned, said so


def test_rank_utilisation_forwards_sync_and_capacity_and_checks_its_arguments() -> None:
    lengths = np.array([1, 3, 3, 1, 4, 4])
    plan = [np.array([0]), np.array([1]), np.array([2]), np.array([3])]
    cost = StepCost(a=1.0, b=0.0)
    assert rank_utilisation(plan, lengths, 2, 2, cost).wall_s == 4.0  # synced per window
    assert rank_utilisation(plan, lengths, 2, 2, cost, sync="micro").wall_s == 6.0  # per micro-batch
    packed = [np.array([0, 1]), np.array([4, 5])]  # documents of 1 + 3 and 4 + 4 tokens
    quad = StepCost(a=0.0, b=1.0)
    assert rank_utilisation(packed, lengths, 1, 1, quad, capacity=8).work_s == 1 + 9 + 16 + 16  # per document
    assert rank_utilisation(packed, lengths, 1, 1, quad).work_s == 2 * 9 + 2 * 16  # padded rows
    for args, needle in (((0, 1, "step"), "ranks must be >= 1"), ((1, 0, "step"), "grad_accum must be >= 1"),
                         ((1, 1, "often"), "sync 'often' is not known")):  # fmt: skip
        with pytest.raises(TuneproofError, match=needle):
            rank_utilisation(plan, lengths, args[0], args[1], cost, sync=args[2])


def test_packed_rows_under_a_callable_cost_carry_no_constant() -> None:
    lengths = np.array([2, 3])
    got = micro_batch_seconds([np.array([0, 1])], lengths, lambda w, rows: rows * w, capacity=5)
    assert got.tolist() == [5.0]


def test_one_step_exactly_is_enough() -> None:
    from tuneproof.data.ranks import check_fills_one_step

    check_fills_one_step(8, 2, 2, 2)
    with pytest.raises(
        TuneproofError, match=r"7 lengths do not fill one optimizer step \(2 x 2 .* = 8 sequences\)"
    ):
        check_fills_one_step(7, 2, 2, 2)
