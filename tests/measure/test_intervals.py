"""Every derived number carries its 95 % interval or says why it has none (issue 21: two identical probes
under load printed mfu_fp32_performed 24.0 % and 44.0 % and quadratic shares 98.3 % and 58.7 % with no
interval beside them; the doctor printed the comparison's gap +1.4 as the sum of +29.0 and -20.3)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fakes import A, B, case_time
from tuneproof.measure import cross_check, fit_scaling
from tuneproof.measure.crosscheck import TERMS
from tuneproof.measure.kernels import PROFILE_COLUMNS
from tuneproof.measure.probe_result import Derived, mfu_numbers
from tuneproof.measure.timing import Timing

WIDTHS = [512.0, 1024.0, 2048.0, 4096.0]
REPEATS = 8
FLOPS = 2.0e12  # performed FLOPs of the step at the widest width; intended half of it
PEAK_TFLOPS = 10.0


def _times(seed: int, rel: float = 0.05) -> list[np.ndarray]:
    """The same step (the reference run's A and B, a 50 ms constant) timed with `rel` multiplicative noise."""
    rng = np.random.default_rng(seed)
    return [case_time(w, c=0.05) * (1 + rel * np.abs(rng.standard_normal(REPEATS))) for w in WIDTHS]


def _profiles(seed: int, rel: float = 0.05, n: int = 4) -> list[np.ndarray]:
    rng = np.random.default_rng(seed + 100)
    out = []
    for w in WIDTHS:
        rows = []
        for _ in range(n):
            noise = 1 + rel * rng.standard_normal()
            row = dict.fromkeys(PROFILE_COLUMNS, 0.0)
            row["attention"] = 0.9 * B * w * w * 1e3 * noise + 0.1 * A * w * 1e3
            row["gemm"] = (0.9 * A * w * 1e3 + 0.1 * B * w * w * 1e3) * noise
            row["idle"] = 40.0
            rows.append([row[c] for c in PROFILE_COLUMNS])
        out.append(np.array(rows))
    return out


def _report(t: float) -> SimpleNamespace:
    """What `mfu_numbers` reads of a FlopReport: its Mfu at step time `t`."""
    denom = t * PEAK_TFLOPS * 1e12
    mfu = SimpleNamespace(dtype="fp32", intended=FLOPS / 2 / denom, performed=FLOPS / denom, step_time_s=t,
                          reason=None, peak_source="table")  # fmt: skip
    return SimpleNamespace(mfu=mfu)


def _mfu(times: np.ndarray) -> list[Derived]:
    timing = Timing(tuple(times.tolist()), (False,) * times.size, 1)
    return mfu_numbers(_report(timing.median_s), timing)


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def test_mfu_carries_the_interval_of_the_step_times_median() -> None:
    times = _times(0)[-1]
    intended, performed = _mfu(times)
    lo_t, hi_t = Timing(tuple(times), (False,) * times.size, 1).median_interval or (0, 0)
    assert performed.name == "mfu_fp32_performed" and performed.interval is not None
    assert performed.interval == pytest.approx((FLOPS / (hi_t * 1e13), FLOPS / (lo_t * 1e13)), rel=1e-12)
    assert performed.interval[0] <= performed.value <= performed.interval[1]  # type: ignore[operator]
    assert intended.interval == pytest.approx((performed.interval[0] / 2, performed.interval[1] / 2))
    assert "95 % interval" in performed.text() and performed.no_interval_reason is None
    out = performed.to_dict()
    assert out["mfu_fp32_performed_interval"] == list(performed.interval)
    assert out["mfu_fp32_performed_no_interval_reason"] is None


def test_mfu_without_enough_repeats_says_why() -> None:
    (one,) = _mfu(np.array([1.0]))[1:]
    assert one.interval is None and one.no_interval_reason == "one repeat: no interval"
    (four,) = _mfu(np.array([1.0, 1.1, 1.05, 0.98]))[1:]
    assert four.no_interval_reason == "4 kept repeats: a median's 95 % interval needs 6"
    assert four.text().endswith("(no interval: 4 kept repeats: a median's 95 % interval needs 6)")
    assert four.to_dict()["mfu_fp32_performed_interval"] is None
    none = SimpleNamespace(
        dtype="bf16",
        intended=None,
        performed=None,
        step_time_s=1.0,
        reason="no peak for this GPU",
        peak_source=None,
    )
    unknown = mfu_numbers(SimpleNamespace(mfu=none), Timing((1.0,) * 6, (False,) * 6, 1))
    assert [d.text() for d in unknown] == [
        "mfu_bf16_intended: unknown (no MFU: no peak for this GPU)",
        "mfu_bf16_performed: unknown (no MFU: no peak for this GPU)",
    ]


@pytest.mark.parametrize("seeds", [(1, 2), (3, 4), (5, 6)])
def test_two_probes_of_the_same_step_with_different_noise_give_overlapping_intervals(seeds) -> None:
    """The trap: two point values far apart. The fix: each carries an interval, and they overlap."""
    runs = [_times(s, rel=0.2) for s in seeds]
    mfu = [_mfu(t[-1])[1] for t in runs]
    assert mfu[0].interval and mfu[1].interval and _overlap(mfu[0].interval, mfu[1].interval)
    fits = [fit_scaling(np.repeat(WIDTHS, REPEATS), np.concatenate(t)) for t in runs]
    for w in WIDTHS:
        cis = [f.quad_share_ci[w] for f in fits if f.quad_share_ci]
        assert len(cis) == 2 and _overlap(*cis), (w, cis)
    checks = [
        cross_check(WIDTHS, t, _profiles(s, rel=0.2), at=WIDTHS[-1], constant=True)
        for t, s in zip(runs, seeds, strict=True)
    ]
    gaps = [
        c.comparison.intervals["comparison_gap"] for c in checks if c.comparison and c.comparison.intervals
    ]
    assert len(gaps) == 2 and _overlap(*gaps)


def test_the_comparisons_terms_each_carry_an_interval_and_add_up_to_the_gap() -> None:
    cc = cross_check(WIDTHS, _times(7), _profiles(7), at=WIDTHS[-1], constant=True)
    c = cc.comparison
    assert c is not None and c.intervals is not None and c.no_interval_reason is None
    parts = [n for n in TERMS if n != "comparison_gap"]
    assert sum(c.points[n] for n in parts) == pytest.approx(c.points["comparison_gap"], abs=1e-9)
    # the terms' intervals come from the same resamples as the gap's; summed, they bracket it here (a
    # percentile interval of a sum is not bound by the sum of the percentiles in general)
    lo = sum(c.intervals[n][0] for n in parts)
    hi = sum(c.intervals[n][1] for n in parts)
    gap = c.intervals["comparison_gap"]
    assert lo <= gap[0] + 1e-9 and gap[1] <= hi + 1e-9
    for n in TERMS:
        assert c.intervals[n][0] <= c.intervals[n][1]
    line = cc.explanation[-1]
    assert f"gap {c.points['comparison_gap']:+.1f} [{gap[0]:+.1f}, {gap[1]:+.1f}] points" in line
    assert line.endswith("(95 % intervals in brackets)")
    out = cc.to_dict()["comparison"]
    assert out["comparison_gap_interval"] == list(gap) and out["verdict"] == c.verdict.outcome
    assert {f"{n}_points" for n in TERMS} <= set(out)


def test_a_comparison_inside_its_noise_is_inconclusive_and_without_repeats_says_why() -> None:
    noisy = cross_check(WIDTHS, _times(8, rel=0.6), _profiles(8, rel=0.6), at=WIDTHS[-1], constant=True)
    assert noisy.comparison is not None and noisy.comparison.intervals is not None
    lo, hi = noisy.comparison.intervals["comparison_gap"]
    if lo < -noisy.verdict.tolerance < hi or lo < noisy.verdict.tolerance < hi:
        assert noisy.comparison.verdict.outcome == "inconclusive"
    few = cross_check(WIDTHS, [t[:3] for t in _times(9)], _profiles(9), at=WIDTHS[-1], constant=True)
    assert few.comparison is not None and few.comparison.intervals is None
    assert few.comparison.verdict.outcome == "inconclusive"
    reason = "widths [512, 1024, 2048, 4096] have fewer than 6 kept repeats: no interval"
    assert few.comparison.no_interval_reason == reason
    assert "(no interval: widths [512" in few.explanation[-1]
    assert few.to_dict()["comparison"]["comparison_gap_interval"] is None


def test_a_share_in_points_prints_with_its_sign() -> None:
    d = Derived(
        name="comparison_gap", value=1.4, interval=(-3.0, 6.2), no_interval_reason=None, unit="points"
    )
    assert d.text() == "comparison_gap = +1.4 points (95 % interval -3.0 to +6.2 points)"
    share = Derived(name="quad_share_4096", value=0.587, interval=(0.40, 0.70), no_interval_reason=None)
    assert share.text() == "quad_share_4096 = 58.7 % (95 % interval 40.0 to 70.0 %)"


def test_the_doctors_summary_gives_every_derived_number_with_its_interval(monkeypatch) -> None:
    from rich.console import Console

    from tuneproof.commands.doctor import DoctorReport, ProbeSection, SkippedSection

    derived = [
        *_mfu(_times(0)[-1]),
        Derived(
            name="comparison_gap",
            value=1.4,
            interval=None,
            no_interval_reason="widths [512] have fewer",
            unit="points",
        ),
    ]
    result = SimpleNamespace(derived=derived, to_dict=lambda: {"derived": "..."})
    report = DoctorReport(model="tiny", sections={"probe": ProbeSection(result, "a note")})
    monkeypatch.setattr(ProbeSection, "render", lambda self, console: None)  # the probe's own tables
    console = Console(record=True, width=200)
    report.render(console)
    text = console.export_text()
    assert "summary (95 % intervals" in text
    for d in derived:
        assert d.text() in text
    summary = report.to_dict()["summary"]
    assert summary["comparison_gap_interval"] is None
    assert summary["comparison_gap_no_interval_reason"] == "widths [512] have fewer"
    assert summary["mfu_fp32_performed_interval"] == list(derived[1].interval or ())
    skipped = DoctorReport(model="tiny", sections={"probe": SkippedSection("no probe here")})
    assert skipped.summary() == [] and skipped.to_dict()["summary"] == {}
