"""The timing harness driven by fake clocks whose right answer is known: warm-up excluded, widths
interleaved, outliers set aside and re-measured, early stop when tight, budget respected."""

from __future__ import annotations

import json

import pytest

from fakes import FakeClock, case_time, noisy
from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError
from tuneproof.measure import robust, time_fn, time_interleaved


def test_warmup_is_never_timed() -> None:
    clock = FakeClock()
    # the first call (warm-up: compilation, allocation) takes 100 s; every later call 1 s
    timing = time_fn(clock.workload(lambda n: 100.0 if n == 0 else 1.0), repeats=4, warmup=1, clock=clock)
    assert timing.times_s == (1.0, 1.0, 1.0, 1.0) and timing.warmup == 1
    assert timing.median_s == 1.0 and timing.spread_s == 0.0
    assert "4 repeats after 1 warm-up" in str(timing)


def test_widths_are_interleaved_round_robin_with_a_rotating_start() -> None:
    order: list[int] = []
    clock = FakeClock()

    def step(w: int):
        def run() -> None:
            order.append(w)
            clock.now += 1.0

        return run

    time_interleaved({w: step(w) for w in (1, 2, 3)}, warmup=0, min_repeats=3, max_repeats=3, clock=clock)
    assert order == [1, 2, 3, 2, 3, 1, 3, 1, 2]


def test_a_burst_hits_every_width_alike() -> None:
    """A neighbour's burst lasting one round slows one repeat of every width, not all of one width."""
    clock = FakeClock()

    def step(w: int):
        def run() -> None:
            slow = 3.0 if 10.0 <= clock.now < 10.0 + 3 * case_time(4096) else 1.0
            clock.now += case_time(w) * slow

        return run

    result = time_interleaved({w: step(w) for w in (1024, 2048, 4096)}, warmup=0, min_repeats=6, clock=clock)
    slowed = {w: sum(t > 1.5 * case_time(w) for t in tm.times_s) for w, tm in result.timings.items()}
    assert max(slowed.values()) <= 2 and all(
        tm.median_s == pytest.approx(case_time(w)) for w, tm in result.timings.items()
    )


def test_one_outlier_is_set_aside_named_and_made_up_for() -> None:
    clock = FakeClock()
    times = {0: 0.54, 1: 0.61, 2: 5.93, 3: 0.57, 4: 0.58, 5: 0.56, 6: 0.55, 7: 0.57, 8: 0.56}
    result = time_interleaved(
        {4096: clock.workload(lambda n: times.get(n - 1, 0.56))},
        warmup=1,
        min_repeats=6,
        target=0.5,
        clock=clock,
    )
    t = result.timings[4096]
    assert 5.93 in t.times_s and 5.93 not in t.kept.tolist() and t.num_outliers == 1
    assert t.repeats >= 6  # re-measured until six repeats are kept
    assert t.median_s == pytest.approx(0.565, abs=0.01)
    assert any("1 outlier repeat(s) excluded (5.93 s" in n for n in result.notes)


def test_stops_early_once_every_median_is_tight() -> None:
    clock = FakeClock()
    result = time_interleaved(
        {w: clock.workload(noisy(w, 0.01, seed=1)) for w in (1024, 2048, 4096)},
        warmup=1,
        min_repeats=6,
        max_repeats=50,
        target=0.05,
        clock=clock,
    )
    assert result.rounds == 6 and "known to +-5 % after 6 rounds" in result.stopped
    assert all((t.relative_halfwidth or 1) <= 0.05 for t in result.timings.values())


def test_noise_keeps_measuring_until_the_budget_ends_and_says_so() -> None:
    clock = FakeClock()
    steps = {w: clock.workload(noisy(w, 0.5, seed=2)) for w in (1024, 2048, 4096)}
    result = time_interleaved(
        steps, warmup=1, min_repeats=6, max_repeats=500, budget_s=40.0, target=0.01, clock=clock
    )
    round_s = sum(case_time(w) for w in (1024, 2048, 4096))
    assert 3 <= result.rounds <= 40.0 / round_s * 1.5 + 1
    assert "40 s budget ended" in result.stopped
    assert any("not to the +-1 % asked for" in n for n in result.notes)


def test_drift_is_shared_by_every_width() -> None:
    """A machine that slows down steadily: interleaving keeps the widths' ratios right."""
    clock = FakeClock()

    def step(w: int):
        def run() -> None:
            clock.now += case_time(w) * (1.0 + 0.01 * clock.now)

        return run

    result = time_interleaved(
        {w: step(w) for w in (1024, 2048, 4096)}, warmup=0, min_repeats=6, max_repeats=6, clock=clock
    )
    m = {w: t.median_s for w, t in result.timings.items()}
    truth = case_time(4096) / case_time(1024)
    assert m[4096] / m[1024] == pytest.approx(truth, rel=0.03)


def test_outlier_rule() -> None:
    assert robust.outliers([0.54, 0.61, 5.93]).tolist() == [False, False, True]
    assert robust.outliers([1.0, 1.0, 1.005]).tolist() == [
        False,
        False,
        False,
    ]  # 0.5 %: jitter, not an outlier
    assert robust.outliers([1.0, 2.0]).tolist() == [False, False]  # two values cannot tell
    # a fast repeat is the machine running free, never an outlier (the doctor under load, 512 wide)
    assert robust.outliers([6.44, 6.5, 0.3224]).tolist() == [False, False, False]
    assert robust.outliers([1.0, 1.01, 0.99, 1.0, 0.01]).tolist() == [False] * 5
    assert robust.median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None  # 95 % needs six
    assert robust.median_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == (1.0, 6.0)


@pytest.mark.parametrize(
    "kw,fragment",
    [
        ({"repeats": 2}, "repeats must be >= 3, got 2 (outliers need three repeats)"),
        ({"repeats": 10_001}, "repeats must be <= 10,000, got 10,001 (outliers need three repeats)"),
        ({"repeats": 3, "warmup": -1}, "warmup must be >= 0, got -1"),
        ({"repeats": 3, "warmup": 101}, "warmup must be <= 100, got 101"),
    ],
)
def test_bad_timing_arguments(kw: dict, fragment: str) -> None:
    with pytest.raises(TuneproofError) as e:
        time_fn(lambda: None, **kw)
    assert e.value.message == fragment


def test_time_fn_defaults_six_repeats_after_one_warm_up() -> None:
    clock = FakeClock()
    calls: list[int] = []
    t = time_fn(clock.workload(lambda n: calls.append(n) or 1.0), clock=clock)
    assert (t.repeats, t.warmup, len(calls)) == (6, 1, 7)


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"min_repeats": 2}, "min_repeats must be >= 3, got 2"),
        ({"max_repeats": 5}, "max_repeats must be >= 6, got 5"),
        ({"budget_s": 0.0}, "budget_s must be > 0, got 0"),
        ({"target": 0.0}, "target must be > 0, got 0"),
        ({"target": 1.5}, "target must be <= 1, got 1.5"),
        ({"min_repeats": 10_001, "max_repeats": 10_001}, "min_repeats must be <= 10,000, got 10,001"),
        ({"max_repeats": 10_001}, "max_repeats must be <= 10,000, got 10,001"),
    ],
)
def test_bad_harness_arguments(kw: dict, message: str) -> None:
    with pytest.raises(TuneproofError) as e:
        time_interleaved({1: lambda: None}, **kw)
    assert e.value.message == message


def test_no_budget_means_the_rounds_end_at_max_repeats() -> None:
    clock = FakeClock()
    r = time_interleaved(
        {1: clock.workload(lambda n: 100.0)},
        warmup=0,
        min_repeats=3,
        max_repeats=4,
        budget_s=None,
        target=1e-9,
        clock=clock,
    )
    assert r.rounds == 4 and r.stopped == "4 rounds (the most allowed)"


def test_peak_command_is_labelled_measured(capsys) -> None:
    assert main(["peak", "--dtype", "fp32", "--max-seconds", "0.2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["label"] == "measured peak" and d["tflops"] > 0 and d["runs"] >= 1


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--dtype", "int4"], "--dtype 'int4' is not known"),
        (["--device", "tpu"], "--device 'tpu' is not known"),
        (["--max-seconds", "nan"], "--max-seconds must be a finite number"),
        (["--max-seconds", "0"], "--max-seconds must be > 0"),
    ],
)
def test_peak_bad_input(capsys, args: list[str], fragment: str) -> None:
    assert main(["peak", *args]) == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-GPU error")
def test_peak_cuda_without_gpu(capsys) -> None:
    assert main(["peak", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_timing_summary_and_record_in_full() -> None:
    from tuneproof.measure.timing import Timing

    t = Timing((0.010, 0.012, 0.011, 0.013, 0.011, 0.100, 0.012), (False,) * 5 + (True, False), warmup=1)
    assert (t.repeats, t.num_outliers) == (6, 1)
    assert t.median_s == pytest.approx(0.0115) and t.min_s == 0.010 and t.spread_s == pytest.approx(0.003)
    assert t.median_interval == (0.010, 0.013)
    assert t.relative_halfwidth == pytest.approx(0.0015 / 0.0115)
    assert str(t) == (
        "median 11.500 ms, 95 % interval 10.000-13.000 (min 10.000, spread 3.000; 6 repeats after 1 warm-up; "
        "1 outlier(s) excluded)"
    )
    d = t.to_dict()
    assert d["outliers_excluded"] == [0.100] and d["median_ci_s"] == [0.010, 0.013] and d["repeats"] == 6
    assert d["times_s"] == list(t.times_s) and d["warmup"] == 1 and d["spread_s"] == pytest.approx(0.003)
    short = Timing((1.0, 2.0, 3.0), (False, False, False), warmup=0)
    assert short.median_interval is None and short.relative_halfwidth is None
    assert str(short) == "median 2000.000 ms (min 1000.000, spread 2000.000; 3 repeats after 0 warm-up)"


def test_time_fn_runs_exactly_the_repeats_asked() -> None:
    clock = FakeClock()
    calls = []
    t = time_fn(clock.workload(lambda n: calls.append(n) or 1.0), repeats=7, warmup=2, clock=clock)
    assert len(calls) == 9 and t.repeats == 7 and t.warmup == 2


def test_skipped_workloads_are_dropped_with_their_reason() -> None:
    from tuneproof.measure.timing import Skip

    clock = FakeClock()
    state = {"n": 0}

    def flaky() -> None:
        state["n"] += 1
        if state["n"] > 2:
            raise Skip("out of memory at width 3")
        clock.now += 1

    def warm_fail() -> None:
        raise Skip("out of memory in the warm-up")

    result = time_interleaved(
        {1: clock.workload(lambda n: 1.0), 2: flaky, 3: warm_fail},
        warmup=1,
        min_repeats=3,
        max_repeats=3,
        clock=clock,
    )
    assert result.skipped == {2: "out of memory at width 3", 3: "out of memory in the warm-up"}
    assert list(result.timings) == [1] and result.timings[1].repeats == 3
    d = result.to_dict()
    assert (
        d["rounds"] == 3
        and d["target_relative_halfwidth"] == 0.05
        and d["stopped"] == "3 rounds (the most allowed)"
    )


def test_nothing_to_time_is_refused() -> None:
    with pytest.raises(TuneproofError) as e:
        time_interleaved({})
    assert e.value.message == "nothing to time (give at least one workload)"


def test_harness_defaults_one_warm_up_thirty_rounds() -> None:
    clock = FakeClock()
    calls: list[int] = []
    run = time_interleaved(
        {"a": clock.workload(lambda n: calls.append(n) or 1.0 + n % 4)},
        budget_s=None,
        clock=clock,
    )
    assert run.rounds == 30 and len(calls) == 31 and run.stopped == "30 rounds (the most allowed)"
    assert run.target == 0.05 and run.timings["a"].warmup == 1


@pytest.mark.parametrize(
    "times,budget,rounds",
    [
        (
            [10.0, 30.0, 10.0, 0.25, 5.0, 100.0],
            None,
            5,
        ),  # the default 60 s: 50 + 10 is not over, 55.25 + 5 is
        ([4.0, 4.0, 4.0, 4.0], 10.0, 3),  # over the budget after three rounds: stop there
    ],
)
def test_budget_counts_the_next_round(times: list[float], budget: float | None, rounds: int) -> None:
    """Rounds stop when the time spent plus one more round (the last one's length) would pass the
    budget, from the third round on."""
    clock = FakeClock()
    seq = [1.0, *times]  # the warm-up first
    kw = {} if budget is None else {"budget_s": budget}
    run = time_interleaved({"a": clock.workload(lambda n: seq[n])}, clock=clock, **kw)  # type: ignore[arg-type]
    limit = 60 if budget is None else budget
    assert run.rounds == rounds and run.stopped == f"the {limit:g} s budget ended after {rounds} rounds"
    assert run.seconds == sum(times[:rounds])


def test_a_median_exactly_at_the_target_is_tight() -> None:
    """Six repeats 0.75 to 1.25 around a median of 1: the median's 95 % interval is [0.75, 1.25],
    +-25 % exactly."""
    clock = FakeClock()
    seq = [1.0, 0.75, 0.875, 1.0, 1.0, 1.125, 1.25, 1.0, 1.0]
    run = time_interleaved(
        {"a": clock.workload(lambda n: seq[n])}, min_repeats=6, target=0.25, budget_s=None, clock=clock
    )
    assert run.rounds == 6 and run.stopped == "every width's median known to +-25 % after 6 rounds"
    assert run.notes == []


def test_time_fn_has_no_budget() -> None:
    """Six 100-second repeats: a 60 s budget would stop after three rounds; time_fn runs all six."""
    clock = FakeClock()
    t = time_fn(clock.workload(lambda n: 100.0), repeats=6, warmup=0, clock=clock)
    assert t.times_s == (100.0,) * 6


def test_interleaved_and_timing_records_in_full() -> None:
    clock = FakeClock()
    times = {64: [1.0, 1.125, 0.875, 1.0, 5.0, 1.0625, 0.9375], 128: [2.0] * 7}  # exact in binary
    run = time_interleaved(
        {w: clock.workload(lambda n, w=w: times[w][n]) for w in times},
        warmup=1,
        min_repeats=3,
        max_repeats=6,
        budget_s=None,
        target=0.2,
        clock=clock,
    )
    assert run.to_dict() == {
        "rounds": 6,
        "seconds": sum(times[64][1:]) + 2.0 * 6,
        "stopped": "6 rounds (the most allowed)",
        "target_relative_halfwidth": 0.2,
        "notes": [
            "64: 1 outlier repeat(s) excluded (5 s vs median 1 s)",
            "64: the median has no 95 % interval (5 kept repeats, it needs 6), not to the +-20 % asked for",
        ],
    }
    assert run.timings[64].to_dict() == {
        "median_s": 1.0,
        "median_ci_s": None,
        "min_s": 0.875,
        "spread_s": 0.25,
        "repeats": 5,
        "outliers_excluded": [5.0],
        "warmup": 1,
        "times_s": [1.125, 0.875, 1.0, 5.0, 1.0625, 0.9375],
    }


def test_two_regimes_are_not_outliers() -> None:
    """Under a neighbour's load 11 of 29 repeats sat at 0.24 s beside 0.11 s ones; all 11 were set
    aside and the interval claimed +-4 %. A fifth or more far above the median is two regimes."""
    import numpy as np

    from tuneproof.measure import robust

    rng = np.random.default_rng(0)
    fast = 0.11 + 0.002 * rng.random(18)
    slow = 0.24 + 0.005 * rng.random(11)
    both = np.concatenate([fast, slow])
    assert not robust.outliers(both).any() and robust.two_regimes(both)
    one_burst = np.concatenate([fast, [0.24]])
    assert robust.outliers(one_burst).sum() == 1 and not robust.two_regimes(one_burst)
    lo, hi = robust.median_interval(both)
    assert hi - lo > 0.01  # the interval shows the spread (more than +-4 % of 0.11 s)
