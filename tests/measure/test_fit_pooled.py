"""The fit decides from the data there is (issue 21): with fewer than 6 repeats per width its intervals
come from the pooled residuals (t-based, `measure.pooled`), and the constant test answers present,
absent or undetermined from any number of repeats, naming the repeats that would decide it.

Before: 4 widths x 3 repeats with a 0.90 s constant in a 1.07 s step, and 3 widths x 3 repeats with
no constant, both printed `constant term: undetermined ... it needs 6 kept repeats per width`, and the
reference run's protocol (three widths, one step each, residuals under 3 ms) could never be decided."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import t as student

from fakes import A, B
from tuneproof.cli.app import main
from tuneproof.core.quantiles import t_quantile
from tuneproof.measure import fit_scaling, read_points
from tuneproof.measure.constant import judge_constant
from tuneproof.measure.fit import nonneg, share_interval, shares
from tuneproof.measure.pooled import fit_medians, fit_rows

DATA = Path(__file__).parent.parent / "data"
WIDTHS = (2048.0, 8192.0, 16384.0)


def _points(c: float, noise: float, repeats: int, seed: int = 1, widths: tuple[float, ...] = WIDTHS):
    """CASE-like rows with relative noise (`noise` x the step), `repeats` per width."""
    rng = np.random.default_rng(seed)
    w = np.repeat(np.array(widths), repeats)
    return w, (c + A * w + B * w * w) * (1 + noise * rng.standard_normal(w.size))


def _truth(w: float, c: float = 0.0) -> float:
    return B * w * w / (c + A * w + B * w * w)


def test_present_constant_from_three_repeats() -> None:
    """4 widths x 3 repeats, C = 0.90 s in a 1.07 s step, largest residual 2 ms: present."""
    fit = fit_scaling(*read_points(DATA / "points_constant_three.csv"))
    assert set(fit.rows.values()) == {3} and fit.fitted(1024.0) == pytest.approx(1.07, abs=0.005)
    assert 1.5e-3 < max(abs(r) for r in fit.residuals_s) < 2.5e-3
    assert fit.constant.verdict == "present" and fit.constant_in_model
    lo, hi = fit.constant.interval or (0.0, 0.0)
    assert fit.constant.margin < lo < 0.9 < hi < 0.91 and "pooled residuals, df 8" in fit.constant.reason
    assert fit.model_reason.startswith("three-term model") and "present" in fit.model_reason
    assert fit.quad_share_ci is not None and fit.num_bootstrap == 0
    assert "t interval from the per-width medians, the pooled residuals (df 8" in (fit.ci_method or "")
    lo, hi = fit.quad_share_ci[8192.0]
    truth = 2.5e-8 * 8192**2 / (0.9 + 1.4e-4 * 8192 + 2.5e-8 * 8192**2)  # how the fixture was made
    assert lo < truth < hi and hi - lo < 0.02


def test_absent_constant_from_three_repeats_reports_the_two_term_model() -> None:
    """3 widths x 3 repeats, no constant: absent, and the shares are the two-term model's (the old
    fit's three-term interpolation printed 51.3 % at 8192 here, with no interval)."""
    w, t = read_points(DATA / "points_three_repeats.csv")
    fit = fit_scaling(w, t)
    assert fit.constant.verdict == "absent" and not fit.constant_in_model and fit.c == 0.0
    assert fit.model == "t = A*w + B*w^2" and "absent (negligible), so it is dropped" in fit.model_reason
    med = np.array(list(fit.medians.values()))
    two = shares(nonneg(np.array(WIDTHS), med, False), np.array([8192.0]), False)[0]
    assert fit.quad_share[8192.0] == pytest.approx(float(two), rel=1e-12)
    assert fit.quad_share_ci is not None
    for x, (lo, hi) in fit.quad_share_ci.items():
        assert lo <= fit.quad_share[x] <= hi and hi - lo < 0.01


def test_the_reference_runs_three_points_are_decided() -> None:
    """The reference run's protocol: three widths over 8x, one step each, residuals under 3 ms, no
    constant term needed (docs/reference-run.md section 2). Decided: absent."""
    fit = fit_scaling(*read_points(DATA / "points_reference_three.csv"))
    assert fit.num_rows == 3 and max(abs(r) for r in fit.residuals_s) < 3e-3
    assert fit.constant.verdict == "absent" and not fit.constant_in_model
    assert "df 1 of the two-term fit" in fit.constant.reason
    assert fit.a == pytest.approx(A, rel=1e-3) and fit.b == pytest.approx(B, rel=1e-3)
    assert fit.quad_share[16384.0] == pytest.approx(0.678, abs=0.001)
    assert fit.quad_share_ci is not None and "df 1" in (fit.ci_method or "")
    lo, hi = fit.quad_share_ci[16384.0]
    assert lo < 0.678 < hi


def test_three_points_can_show_a_constant_absent_but_never_present() -> None:
    """Three rows for three coefficients: C's interval takes the two-term fit's residual scale, which a
    real constant inflates. A real 0.3 s constant is then undetermined, with the advice to repeat."""
    fit = fit_scaling(*_points(c=0.3, noise=0.0, repeats=1))
    assert fit.constant.verdict == "undetermined" and fit.constant_in_model
    assert fit.constant.repeats_to_decide and fit.constant.repeats_to_decide > 1
    assert "a second repeat per width gives the noise its own estimate" in fit.constant.reason
    assert fit.quad_share_ci is None
    assert fit.ci_reason == (
        "3 rows for 3 coefficients: no residual is left to estimate the noise "
        "(time a second repeat per width, or another width)"
    )
    assert "two-term model would give" in fit.model_reason
    two = fit_scaling(*_points(c=0.3, noise=0.0, repeats=2))  # a second repeat, no noise: decided
    assert two.constant.verdict == "present" and two.c == pytest.approx(0.3, rel=1e-9)


def test_one_row_per_width_decides_from_the_fit_residuals_when_widths_outnumber_coefficients() -> None:
    fit = fit_scaling(*_points(c=0.0, noise=0.001, repeats=1, widths=(2048.0, 4096.0, 8192.0, 16384.0)))
    assert fit.constant.verdict == "absent" and "pooled residuals, df 1)" in fit.constant.reason
    present = fit_scaling(*_points(c=0.9, noise=0.0005, repeats=1, widths=(2048.0, 4096.0, 8192.0, 16384.0)))
    assert present.constant.verdict == "present"


@pytest.mark.parametrize("noise", [0.0, 1e-9])
def test_no_noise_and_tiny_noise_are_exact(noise: float) -> None:
    for c, repeats in ((0.0, 3), (0.5, 3), (0.0, 1)):
        fit = fit_scaling(*_points(c=c, noise=noise, repeats=repeats), at=[65536.0])
        assert fit.quad_share_ci is not None
        for x, (lo, hi) in fit.quad_share_ci.items():
            assert lo <= _truth(x, c) + 1e-9 and _truth(x, c) - 1e-9 <= hi and hi - lo < 1e-6
        lo, hi = fit.constant.interval or (1.0, -1.0)
        assert lo - 1e-6 <= c <= hi + 1e-6 and hi - lo < 1e-5
        assert fit.constant.verdict == ("present" if c else "absent")


def test_the_95_interval_covers_the_truth_about_95_percent_of_the_time() -> None:
    """Seeded simulation, 200 draws of 3 widths x 3 repeats with 1 % relative noise and a 0.2 s constant:
    C's interval and the three-term share interval each cover the truth in about 95 % of draws (a
    binomial 95 % band for 200 draws at 0.95 is about 0.92-0.98)."""
    rng = np.random.default_rng(2026)
    w = np.array(WIDTHS)
    c_true, truth = 0.2, _truth(16384.0, 0.2)
    covered_c = covered_share = 0
    for _ in range(200):
        t = (0.2 + A * w + B * w * w)[:, None] * (1 + 0.01 * rng.standard_normal((3, 3)))
        kept = list(t)
        pf = fit_rows(w, kept, np.median(t, axis=1), True)
        lo, hi = pf.coef_interval(0)
        covered_c += lo <= c_true <= hi
        lo, hi = pf.share_interval(16384.0)
        covered_share += lo <= truth <= hi
    assert 0.91 <= covered_c / 200 <= 0.99 and 0.91 <= covered_share / 200 <= 0.99


def test_undetermined_names_the_repeats_that_would_decide_it() -> None:
    fit = fit_scaling(*_points(c=0.0, noise=0.03, repeats=3))
    n = fit.constant.repeats_to_decide
    assert fit.constant.verdict == "undetermined" and n is not None and n > 3
    assert f"about {n} repeats per width would decide it" in fit.constant.reason
    # the named count is the first at which (t_0.975 + t_0.8)(df_n) * SE_now * sqrt(3 / n) fits inside the
    # band: the test then decides 80 % of the time if the estimate is the truth (the medians form: df 3n - 3)
    _, t = _points(c=0.0, noise=0.03, repeats=3)
    pf = fit_medians(np.array(WIDTHS), list(t.reshape(3, 3)), np.median(t.reshape(3, 3), axis=1), True)
    target = fit.constant.margin - abs(fit.constant.c)
    unit = np.array([1.0, 0.0, 0.0])
    assert pf.halfwidth(unit) == pytest.approx((fit.constant.interval[1] - fit.constant.interval[0]) / 2)
    base = pf.halfwidth(unit) / t_quantile(6) * np.sqrt(3)

    def reach(k: int) -> float:
        return (t_quantile(3 * k - 3) + float(student.ppf(0.8, 3 * k - 3))) * base / np.sqrt(k)

    assert reach(n) < target <= reach(n - 1)
    assert pf.repeats_to_shrink(unit, -1.0, pf.s, 1000) is None  # nothing shrinks below 0
    assert fit.constant_in_model and "undetermined and an unproven 'no overhead'" in fit.model_reason


def test_share_interval_for_other_callers() -> None:
    w, t = read_points(DATA / "points_three_repeats.csv")
    ci, how = share_interval(w, t, 32768.0)
    assert (
        ci is not None
        and ci[0] < ci[1]
        and how.startswith("95 % t interval from the per-width medians, the pooled residuals")
    )
    fit = fit_scaling(w, t, at=[32768.0])
    assert fit.share_ci(32768.0) == (ci, how)
    with pytest.raises(KeyError):
        fit.share_ci(4096.0)
    none, why = share_interval(*_points(c=0.3, noise=0.0, repeats=1), 16384.0)
    assert none is None and why.startswith("3 rows for 3 coefficients")
    case, how = share_interval(*read_points(DATA / "points_case.csv"), 16384.0)
    assert case is not None and how == "95 % percentile bootstrap (2000 resamples of the repeats)"


def test_fit_json_says_how_the_intervals_were_made_and_which_model(capsys) -> None:
    assert main(["fit", "--points", str(DATA / "points_constant_three.csv"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["constant"]["verdict"] == "present" and d["quad_share_ci"] is not None
    assert d["ci_method"].startswith("95 % t interval") and d["model_reason"].startswith("three-term")
    assert main(["fit", "--points", str(DATA / "points_reference_three.csv")]) == 0
    out = capsys.readouterr().out
    assert "model: two-term model" in out and "constant term: absent" in out


def test_undetermined_beyond_any_sensible_count_says_quieten_the_machine() -> None:
    w, t = _points(c=0.0, noise=0.25, repeats=3, seed=10)  # 25 % noise on 3 repeats: C-hat 0.28 s
    fit = fit_scaling(w, np.abs(t))
    assert fit.constant.verdict == "undetermined" and fit.constant.repeats_to_decide == 291
    # an estimate a hair inside a band a hundred times narrower than the interval: past any sensible count
    far = judge_constant(0.09, (-1.0, 1.2), margin=0.1, repeats=3)
    assert far.repeats_to_decide is None
    assert "more than 1000 repeats per width would be needed: quieten the machine" in far.reason
    # the JSON says the same as a number, not a bare null (issue 33's leftover)
    assert far.to_dict()["repeats_to_decide_more_than"] == 1000
    assert fit.constant.to_dict()["repeats_to_decide_more_than"] is None
