"""The estimator every gate decides with (gate.clustered, gate.stats.estimate): its pieces by hand and its
interval's coverage by seeded simulation with a known truth."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from tuneproof.gate import clustered, stats
from tuneproof.gate.stats import FAIL, INCONCLUSIVE, PASS, Floor, MetricResult, verdict_for


def test_holm_by_hand() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.06
    assert clustered.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert clustered.holm([0.5]) == [0.5]
    assert clustered.holm([0.9, 0.4]) == [0.9, 0.8]  # 0.4 x 2; then 0.9 x 1, never below an earlier one
    assert clustered.holm([0.9, 0.8]) == [1.0, 1.0]  # capped at 1


def test_equivalence_p_is_the_larger_one_sided_t_test() -> None:
    delta, se, df, band = 0.3, 0.4, 20, 1.0
    want = max(sps.t.sf((delta + band) / se, df), sps.t.sf((band - delta) / se, df))
    assert clustered.equivalence_p(delta, se, df, band) == pytest.approx(want)
    assert (
        clustered.equivalence_p(0.0, 0.0, 5, 1.0) == 0.0 and clustered.equivalence_p(2.0, 0.0, 5, 1.0) == 1.0
    )


def test_mde_is_detected_at_80_percent_and_power_grows_with_the_effect() -> None:
    se, df = 0.7, 40
    assert clustered.power(clustered.mde(se, df), se, df) == pytest.approx(0.80, abs=1e-6)
    assert clustered.power(0.5, se, df) < clustered.power(1.0, se, df) < clustered.power(3.0, se, df)


def _arm(
    rng: np.random.Generator, level: np.ndarray, runs: int, shift_sd: float, noise_sd: float
) -> np.ndarray:
    shifts = rng.normal(0, shift_sd, size=(runs, 1))
    return level[None, :] + shifts + rng.normal(0, noise_sd, size=(runs, level.size))


def test_the_standard_error_adds_the_run_shift_only_where_the_runs_shift() -> None:
    rng = np.random.default_rng(0)
    level = rng.normal(50, 10, size=200)
    quiet_b, quiet_t = _arm(rng, level, 4, 0.0, 3.0), _arm(rng, level, 4, 0.0, 3.0)
    ok = np.ones(200, bool)
    est = stats.estimate(quiet_b, quiet_t, ok)
    d = quiet_t.mean(axis=0) - quiet_b.mean(axis=0)
    assert est.test == "clustered t" and est.df == 199 and not est.shift
    assert est.se == pytest.approx(np.std(d, ddof=1) / math.sqrt(200))  # no shift seen: documents only
    shifted_b, shifted_t = _arm(rng, level, 4, 4.0, 3.0), _arm(rng, level, 3, 4.0, 3.0)
    sc = clustered.run_variance(shifted_b, shifted_t)
    est = stats.estimate(shifted_b, shifted_t, ok)
    d = shifted_t.mean(axis=0) - shifted_b.mean(axis=0)
    assert sc > 0 and est.shift
    shift_part, doc_part = sc * (1 / 4 + 1 / 3), np.var(d, ddof=1) / 200
    assert est.se == pytest.approx(math.sqrt(doc_part + shift_part))
    # Welch-Satterthwaite: the documents' part has 199 df, the shift 3 + 2
    assert est.df == pytest.approx((doc_part + shift_part) ** 2 / (doc_part**2 / 199 + shift_part**2 / 5))
    # sigma_c^2 by hand: (MSB - MSW) / (n - 1), each pooled over the arms weighted by R_a - 1
    msb = (
        3 * 200 * np.var(shifted_b.mean(axis=1), ddof=1) + 2 * 200 * np.var(shifted_t.mean(axis=1), ddof=1)
    ) / 5
    msw = (3 * np.var(shifted_b, axis=0, ddof=1).mean() + 2 * np.var(shifted_t, axis=0, ddof=1).mean()) / 5
    assert sc == pytest.approx((msb - msw) / 199)


@pytest.mark.parametrize(
    ("runs", "shift_sd", "low"),
    [(2, 0.0, 0.93), (5, 0.0, 0.92), (3, 2.0, 0.89), (5, 4.0, 0.93), (2, 1.0, 0.82), (5, 1.0, 0.90)],
)
def test_the_interval_covers_the_truth_at_its_nominal_rate(runs: int, shift_sd: float, low: float) -> None:
    """y = level_i + run shift + noise (SD 4), 60 documents, the tuned arm 1.5 higher: the 95 % interval's
    coverage over 600 seeded trials (binomial SD 0.9 %). With no shifts or large ones, nominal; a shift the
    F test half sees (SD 1) leaves it short, most at 2 runs per arm (gate.clustered's docstring)."""
    rng = np.random.default_rng(11)
    true, hits, trials = 1.5, 0, 600
    ok = np.ones(60, bool)
    for _ in range(trials):
        level = rng.normal(50, 10, size=60)
        b, t = _arm(rng, level, runs, shift_sd, 4.0), _arm(rng, level + true, runs, shift_sd, 4.0)
        lo, hi = stats.estimate(b, t, ok).ci95
        hits += lo <= true <= hi
    assert low <= hits / trials <= 0.975, hits / trials


def _judged(name: str, outcome: str, p: float) -> MetricResult:
    m = MetricResult(
        name=name,
        wanted="up",
        unit="",
        base=0.0,
        tuned=1.0,
        delta=1.0,
        floor=None,
        floor_source="none",
        floor_detail="",
        ratio=None,
        ci95=(0.5, 1.5),
        mde=None,
        num_prompts=10,
        judgement=None,
    )
    m.judgement = verdict_for(outcome, "because", 0.5, 0.5)
    m.extra["p_value"] = p
    return m


def test_holm_demotes_a_verdict_that_stands_alone_but_not_in_the_family() -> None:
    judged = {"a": _judged("a", PASS, 0.001), "b": _judged("b", FAIL, 0.03), "c": _judged("c", PASS, 0.2)}
    notes = stats.holm_correct(judged)
    assert judged["a"].verdict == PASS  # 0.003 after the correction
    assert judged["b"].verdict == INCONCLUSIVE and "not after Holm's correction" in judged["b"].reason
    assert judged["b"].extra["p_holm"] == pytest.approx(0.06)
    assert notes and "not significant after it: b" in notes[0]
    # one verdict alone is not corrected
    alone = {"b": _judged("b", FAIL, 0.03)}
    assert stats.holm_correct(alone) == [] and alone["b"].verdict == FAIL


def test_a_no_change_pass_carries_its_equivalence_p_into_the_correction() -> None:
    same = np.array([[0.0, 1.0, 0.0, 1.0] * 8])  # identical arms: no change, well inside a floor of 5
    kept = stats.judge_metric("kept", "no-change", same * 10, same * 10, Floor.given(5.0))
    assert kept.verdict == PASS and kept.extra["p_value"] == 0.0
    other = _judged("other", FAIL, 0.04)
    judged = {"kept": kept, "other": other}
    stats.holm_correct(judged)
    assert kept.verdict == PASS and other.verdict == FAIL  # 0.04 x 1 after the 0 ranked first


def test_a_counted_run_shift_is_said_with_its_df_and_what_narrows_it() -> None:
    rng = np.random.default_rng(4)
    level = rng.normal(50, 10, size=200)
    quiet = stats.judge_metric(
        "m", "up", _arm(rng, level, 3, 0, 3), _arm(rng, level + 3, 3, 0, 3), Floor.given(1)
    )
    assert quiet.verdict == PASS and "runs shift" not in quiet.reason
    b, t = _arm(rng, level, 3, 5.0, 3), _arm(rng, level + 3, 3, 5.0, 3)
    shifted = stats.judge_metric("m", "up", b, t, Floor.given(1))
    est = stats.estimate(b, t, np.ones(200, bool))
    assert est.shift and est.df < 10  # the runs, not the 200 documents, measure it
    assert f"the interval carries it with {est.df:.1f} df: more runs per arm narrow it" in shifted.reason
