"""BucketBatchSampler: padding, mixing, determinism, resume, ranks, token budgets, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuneproof.core.errors import TuneproofError
from tuneproof.data import BucketBatchSampler, plan_stats, random_plan, synthetic_lengths

LENGTHS, ROOTS = synthetic_lengths()


def test_tightest_bucketing_on_the_shipped_set() -> None:
    s = BucketBatchSampler(LENGTHS, micro_batch_size=2, grad_accum=16, roots=ROOTS)
    ours = plan_stats(s.global_plan(), LENGTHS, ROOTS, 16)
    rand = plan_stats(random_plan(LENGTHS.size, 2), LENGTHS, ROOTS, 16)
    assert ours.padding_fraction <= 0.002 and rand.padding_fraction > 0.25
    assert ours.roots_per_window >= 0.98 * rand.roots_per_window
    assert ours.length_mix >= 0.95 * rand.length_mix
    assert ours.zero_pad_share > 0.7


@given(n=st.integers(1, 300), mb=st.integers(1, 7), drop=st.booleans(), seed=st.integers(0, 5))
@settings(max_examples=60, deadline=None)
def test_every_index_once_per_epoch(n: int, mb: int, drop: bool, seed: int) -> None:
    lengths = np.random.default_rng(seed).integers(1, 500, n)
    s = BucketBatchSampler(lengths, mb, seed=seed, drop_last=drop)
    batches = list(s)
    flat = sorted(i for b in batches for i in b)
    if drop:
        assert len(flat) == (n // mb) * mb and len(set(flat)) == len(flat)
        assert all(len(b) == mb for b in batches)
    else:
        assert flat == list(range(n))
    # neighbours in length order: no micro-batch spans lengths another could have covered better
    for b in batches:
        assert len(b) <= mb


def test_deterministic_per_seed_and_epoch() -> None:
    a = BucketBatchSampler(LENGTHS, 2, seed=3)
    b = BucketBatchSampler(LENGTHS, 2, seed=3)
    assert list(a) == list(b)
    a.set_epoch(1)
    b.set_epoch(1)
    first = list(a)
    assert first == list(b)
    a.set_epoch(0)
    assert list(a) != first  # a new epoch is a new order
    assert list(BucketBatchSampler(LENGTHS, 2, seed=4)) != list(BucketBatchSampler(LENGTHS, 2, seed=3))


def test_resume_mid_epoch_at_the_exact_position() -> None:
    s = BucketBatchSampler(LENGTHS, 2, seed=7)
    s.set_epoch(2)
    full = list(s)
    s.set_epoch(2)
    it = iter(s)
    head = [next(it) for _ in range(123)]
    state = s.state_dict()
    assert state == {"seed": 7, "epoch": 2, "position": 123}
    fresh = BucketBatchSampler(LENGTHS, 2, seed=7)
    fresh.load_state_dict(state)
    assert head + list(fresh) == full
    assert len(list(fresh)) == len(full)  # the next pass starts at the beginning again


def test_resume_refuses_another_seed() -> None:
    s = BucketBatchSampler(LENGTHS, 2, seed=1)
    with pytest.raises(TuneproofError, match="same seed"):
        s.load_state_dict({"seed": 2, "epoch": 0, "position": 5})


@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_are_disjoint_and_equally_long(drop_last: bool) -> None:
    n, r = 1001, 3  # 501 micro-batches of 2: not divisible by 3
    lengths = np.random.default_rng(0).integers(1, 4000, n)
    plans = [
        list(BucketBatchSampler(lengths, 2, seed=5, num_replicas=r, rank=k, drop_last=drop_last))
        for k in range(r)
    ]
    assert len({len(p) for p in plans}) == 1
    sets = [{tuple(b) for b in p} for p in plans]
    if drop_last:
        assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
    else:  # the remainder is filled by repeating the first micro-batches of the plan, stated in the docs
        total = sum(len(p) for p in plans)
        assert total == -(-len(BucketBatchSampler(lengths, 2, seed=5).global_plan()) // r) * r


def test_token_budget_micro_batches() -> None:
    lengths = np.array([100, 100, 100, 400, 400, 900, 50, 50, 50, 50])
    s = BucketBatchSampler(lengths, micro_batch_size=8, max_tokens=1000, shuffle=False)
    plan = s.global_plan()
    assert all(len(b) * lengths[b].max() <= 1000 for b in plan)
    assert sorted(int(i) for b in plan for i in b) == list(range(10))
    with pytest.raises(TuneproofError, match="max_tokens 800 is below length 900"):
        BucketBatchSampler(lengths, 8, max_tokens=800)


def test_widths_for_the_recompile_guard() -> None:
    s = BucketBatchSampler([10, 10, 17, 17, 33, 33], 2, shuffle=False)
    assert s.widths() == [10, 17, 33] and s.widths(pad_to_multiple_of=16) == [16, 32, 48]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"lengths": []}, "lengths must be a non-empty list of integers (pass one length per example)"),
        ({"lengths": [[1, 2], [3]]}, "lengths must be a list of integers (pass one length per example)"),
        (
            {"lengths": [[1, 2], [3, 4]]},
            "lengths must be a non-empty list of integers (pass one length per example)",
        ),
        (
            {"lengths": [3, 0, 4]},
            "lengths at index 1 is 0: lengths must be in [1, 2,147,483,647] "
            "(drop empty sequences before batching)",
        ),
        (
            {"lengths": [3, -2]},
            "lengths at index 1 is -2: lengths must be in [1, 2,147,483,647] "
            "(drop empty sequences before batching)",
        ),
        (
            {"lengths": [2**40]},
            "lengths at index 0 is 1099511627776: lengths must be in [1, 2,147,483,647] "
            "(drop empty sequences before batching)",
        ),
        (
            {"lengths": [3.0, 2.5]},
            "lengths at index 1 is not an integer: np.float64(2.5) (lengths are token counts)",
        ),
        (
            {"lengths": [3, float("nan")]},
            "lengths at index 1 is not an integer: np.float64(nan) (lengths are token counts)",
        ),
        ({"lengths": ["a", "b"]}, "lengths must be integers, got <U1 values (lengths are token counts)"),
        ({"lengths": [True, False]}, "lengths must be integers, got bool values (lengths are token counts)"),
        ({"micro_batch_size": 0}, "micro_batch_size must be >= 1, got 0"),
        ({"grad_accum": 1.5}, "grad_accum must be an integer, got 1.5"),
        ({"seed": -1}, "seed must be >= 0, got -1"),
        (
            {"bucket_width": 4, "boundaries": [8]},
            "bucket_width and boundaries together (give one of them (or neither: tightest))",
        ),
        ({"bucket_width": 0}, "bucket_width must be >= 1, got 0 (a width in tokens)"),
        ({"boundaries": [8, 4]}, "boundaries must be strictly increasing (e.g. [512, 1024, 2048])"),
        ({"boundaries": [4, 4]}, "boundaries must be strictly increasing (e.g. [512, 1024, 2048])"),
        ({"roots": [1, 2]}, "roots has 2 ids for 3 lengths (give one root id per length)"),
        ({"max_tokens": 0}, "max_tokens must be >= 1, got 0 (a token budget per micro-batch)"),
        ({"max_tokens": 4}, "max_tokens 4 is below length 5 at index 0 (raise it or truncate that example)"),
        ({"num_replicas": 2, "rank": 2}, "rank must be <= 1, got 2 (rank must be in [0, num_replicas))"),
        ({"num_replicas": 0, "rank": 0}, "num_replicas must be >= 1, got 0"),
    ],
)
def test_bad_input(kwargs: dict, message: str) -> None:
    args = {"lengths": [5, 6, 7], "micro_batch_size": 2, **kwargs}
    with pytest.raises(TuneproofError) as e:
        BucketBatchSampler(**args)
    assert e.value.message == message


def test_resume_refusal_in_full() -> None:
    s = BucketBatchSampler([3, 4], 1, seed=1)
    with pytest.raises(TuneproofError) as e:
        s.load_state_dict({"seed": 2, "epoch": 0, "position": 5})
    assert e.value.message == (
        "state was saved with seed 2, this sampler has 1 (build the sampler with the same seed to resume)"
    )
    s.load_state_dict({"seed": 1, "epoch": "3", "position": "4"})
    assert (s.epoch, s.position) == (3, 4) and s.state_dict(consumed=2) == {
        "seed": 1,
        "epoch": 3,
        "position": 2,
    }


def test_world_without_torch_distributed_is_one_rank() -> None:
    s = BucketBatchSampler([3, 4, 5], 1)
    assert (s.num_replicas, s.rank) == (1, 0)
    s = BucketBatchSampler([3, 4, 5], 1, num_replicas=3)  # a rank left out is taken as 0
    assert (s.num_replicas, s.rank) == (3, 0)
    s = BucketBatchSampler([3, 4, 5], 1, rank=0)
    assert (s.num_replicas, s.rank) == (1, 0)


def test_rank_plans_exactly() -> None:
    lengths = [10, 20, 30, 40, 50]  # five micro-batches of one, unshuffled: 0..4 in length order

    def plans(rank_plan: str, drop_last: bool) -> list[list[int]]:
        return [
            [int(b[0]) for b in BucketBatchSampler(lengths, 1, shuffle=False, num_replicas=2, rank=k,
                                                   drop_last=drop_last, rank_plan=rank_plan).plan()]
            for k in (0, 1)
        ]  # fmt: skip

    # interleaved: round-robin over the plan; the first is repeated, or the last dropped
    assert plans("interleaved", False) == [[0, 2, 4], [1, 3, 0]]
    assert plans("interleaved", True) == [[0, 2], [1, 3]]
    # synchronous: neighbours run together, grouped from the longest end; the short group is
    # completed with its nearest longer neighbour, or dropped
    assert plans("synchronous", False) == [[0, 1, 3], [1, 2, 4]]
    assert plans("synchronous", True) == [[1, 3], [2, 4]]
    assert len(BucketBatchSampler(lengths, 1, shuffle=False, num_replicas=2, rank=1)) == 3


def test_rank_groups_cycle_when_there_are_fewer_micro_batches_than_ranks() -> None:
    from tuneproof.data.sampler import rank_groups

    assert rank_groups(2, 4, False, None).tolist() == [[0, 1, 0, 1]]
    assert rank_groups(2, 4, True, None).shape == (0, 4)
    rng = np.random.default_rng(0)
    groups = rank_groups(10, 3, False, rng)  # shuffled rows, shuffled inside: the same members
    assert sorted(map(sorted, groups.tolist())) == [[0, 1, 2], [1, 2, 3], [4, 5, 6], [7, 8, 9]]


@pytest.mark.parametrize("grad_accum", [1, 4])
def test_synchronous_ranks_hold_neighbouring_widths_at_every_step(grad_accum: int) -> None:
    lengths = np.random.default_rng(1).integers(1, 4000, 3000)
    ranks = 4
    widths = []
    for plan in ("synchronous", "interleaved"):
        plans = [
            BucketBatchSampler(lengths, 2, grad_accum, seed=3, num_replicas=ranks, rank=k, rank_plan=plan)
            for k in range(ranks)
        ]
        w = np.array([[int(lengths[b].max()) for b in p.plan()] for p in plans])  # rank x step
        widths.append(w.max(axis=0) - w.min(axis=0))  # tokens between the widest and narrowest rank
        seen = [int(i) for p in plans for b in p.plan() for i in b]
        assert set(seen) == set(range(lengths.size))  # every example, on some rank
    synchronous, interleaved = widths
    assert synchronous.max() < 60  # 8 neighbours of 3,000 lengths in 1..4,000 span ~11 tokens
    assert np.median(interleaved) > 1000  # unrelated widths: the straggler the default removes


def test_bucket_keys_by_width_and_boundaries() -> None:
    lengths = np.array([1, 7, 8, 15, 16, 100])
    assert BucketBatchSampler(lengths, 1, bucket_width=8).bucket_keys().tolist() == [0, 0, 1, 1, 2, 12]
    assert BucketBatchSampler(lengths, 1, boundaries=[8, 16]).bucket_keys().tolist() == [0, 0, 1, 1, 2, 2]
    assert BucketBatchSampler(lengths, 1).bucket_keys().tolist() == lengths.tolist()


def test_sort_key_order_is_stable_by_key_and_random_among_equals() -> None:
    from tuneproof.data.sampler import sort_key_order

    keys = np.array([5, 3, 5, 3, 70000, 1])
    assert sort_key_order(keys, None).tolist() == [5, 1, 3, 0, 2, 4]
    shuffled = sort_key_order(keys, np.random.default_rng(0))
    assert keys[shuffled].tolist() == [1, 3, 3, 5, 5, 70000]
    orders = {
        tuple(sort_key_order(np.zeros(6, dtype=np.int64), np.random.default_rng(s)).tolist())
        for s in range(5)
    }
    assert len(orders) > 1  # ties are broken at random


def test_token_budget_plan_exactly() -> None:
    from tuneproof.data.sampler import token_budget_chunks

    order = np.arange(6)
    lengths = np.array([10, 10, 10, 30, 30, 60])
    plan = token_budget_chunks(order, lengths, max_tokens=60, max_items=4)
    assert [b.tolist() for b in plan] == [[0, 1, 2], [3, 4], [5]]
    plan = token_budget_chunks(order, lengths, max_tokens=60, max_items=2)
    assert [b.tolist() for b in plan] == [[0], [1, 2], [3, 4], [5]]
