"""BucketBatchSampler: padding, mixing, determinism, resume, ranks, token budgets, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuneproof.data import BucketBatchSampler, plan_stats, random_plan, synthetic_lengths
from tuneproof.errors import TuneproofError

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
    "kwargs,fragment",
    [
        ({"lengths": []}, "non-empty"),
        ({"lengths": [3, 0, 4]}, "index 1 is 0"),
        ({"lengths": [3, -2]}, "index 1 is -2"),
        ({"lengths": [3.0, 2.5]}, "index 1 is not an integer"),
        ({"micro_batch_size": 0}, "micro_batch_size must be >= 1"),
        ({"roots": [1, 2]}, "roots has 2 ids for 3 lengths"),
        ({"max_tokens": 4}, "max_tokens 4 is below length 5"),
        ({"bucket_width": 4, "boundaries": [8]}, "bucket_width and boundaries together"),
        ({"num_replicas": 2, "rank": 2}, "rank must be <= 1, got 2"),
        ({"lengths": [3, float("nan")]}, "index 1 is not an integer"),
        ({"lengths": ["a", "b"]}, "lengths must be integers"),
        ({"lengths": [True, False]}, "lengths must be integers"),
        ({"seed": -1}, "seed must be >= 0"),
        ({"grad_accum": 1.5}, "grad_accum must be an integer"),
        ({"lengths": [2**40]}, "lengths must be in [1, 2,147,483,647]"),
    ],
)
def test_bad_input(kwargs: dict, fragment: str) -> None:
    args = {"lengths": [5, 6, 7], "micro_batch_size": 2, **kwargs}
    with pytest.raises(TuneproofError) as e:
        BucketBatchSampler(**args)
    assert fragment in e.value.message
