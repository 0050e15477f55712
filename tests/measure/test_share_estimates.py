"""A share's estimate and its interval come from one statistic; the summary shows only what the
section shows (fresh-eyes trial 21 of `tuneproof probe` / `tuneproof doctor`)."""

from __future__ import annotations

import numpy as np
import pytest

# a probe under load (fresh-eyes trial 21): 7 repeats at each width, one process holding a core
LOAD = {
    512: [0.1505, 0.1609, 0.1602, 0.1543, 0.1543, 0.2925, 0.4099],
    1024: [0.6237, 0.6014, 0.6689, 0.6051, 0.5438, 0.7378, 0.5870],
    2048: [1.5787, 1.6855, 1.8839, 1.3442, 1.6909, 1.8153, 1.4804],
}


def _rows() -> tuple[np.ndarray, np.ndarray]:
    w = np.concatenate([np.full(len(v), float(k)) for k, v in LOAD.items()])
    return w, np.concatenate([np.asarray(v) for v in LOAD.values()])


def test_every_share_lies_inside_its_own_interval_under_load() -> None:
    """The table printed 55.6 % beside 0.0-34.5 (the NNLS share beside the unconstrained bootstrap's
    interval); now the estimate is the interval's own statistic, or it is marked unstable."""
    from tuneproof.measure import fit_scaling

    fit = fit_scaling(*_rows())
    assert fit.quad_share_ci is not None
    for w, share in fit.quad_share.items():
        lo, hi = fit.quad_share_ci[w]
        assert w in fit.unstable or lo - 1e-3 <= share <= hi + 1e-3, (w, share, lo, hi)
    assert fit.quad_share[512.0] < 0.345  # not the 55.6 % the trial saw


def test_a_share_outside_its_interval_is_marked_unstable(monkeypatch) -> None:
    import tuneproof.measure.fit as fit_module
    from tuneproof.measure.probe_result import Derived  # noqa: F401 (the module imports)

    real = fit_module.bootstrap

    def shifted(samples, statistic, seed, n=fit_module.BOOTSTRAP):  # type: ignore[no-untyped-def]
        lo, hi = real(samples, statistic, seed, n)
        return lo + 2.0, hi + 2.0  # every interval far above every estimate

    monkeypatch.setattr(fit_module, "bootstrap", shifted)
    fit = fit_module.fit_scaling(*_rows())
    assert set(fit.unstable) == set(fit.quad_share)
    assert fit.to_dict()["unstable_widths"] == sorted(fit.quad_share)


def test_the_comparison_gap_lies_inside_its_interval_under_load() -> None:
    """The trial printed `gap +39.8 [-51.4, +34.2]`: the gap came from the NNLS share."""
    from tuneproof.measure.crosscheck import cross_check
    from tuneproof.measure.kernels import PROFILE_COLUMNS

    rng = np.random.default_rng(0)
    widths = [float(k) for k in LOAD]
    att = PROFILE_COLUMNS.index("attention")
    profiles = []
    for w in widths:
        row = np.zeros(len(PROFILE_COLUMNS))
        row[att] = 1e-4 * w * w
        row[PROFILE_COLUMNS.index("gemm")] = 0.05 * w
        profiles.append(np.array([row * (1 + 0.05 * rng.standard_normal()) for _ in range(3)]))
    cc = cross_check(widths, [np.asarray(v) for v in LOAD.values()], profiles, at=2048.0, constant=True)
    assert cc.comparison is not None and cc.comparison.intervals is not None
    lo, hi = cc.comparison.intervals["comparison_gap"]
    assert lo - 0.1 <= cc.comparison.points["comparison_gap"] <= hi + 0.1


def test_no_attribution_means_no_comparison_in_the_summary() -> None:
    """The doctor's summary printed comparison_gap = +12.7 points while its probe section said "no
    attribution by kernel class" and printed no comparison."""
    from types import SimpleNamespace

    from tuneproof.measure import probe_result

    note = "the profiled time does not follow A*w + B*w^2 (...): no attribution by kernel class"
    cross = SimpleNamespace(
        attributable=False,
        notes=[note],
        verdict=SimpleNamespace(gap=1.0, interval=None),
        comparison=SimpleNamespace(points={"comparison_gap": 12.7}, intervals=None, no_interval_reason="x"),
    )
    fit = SimpleNamespace(quad_share={}, unstable=())
    result = SimpleNamespace(fit=fit, cross=cross, flops=None, timings={1: None}, profiled_width=1)
    orig = probe_result.mfu_numbers
    probe_result.mfu_numbers = lambda *a: []  # type: ignore[assignment]
    try:
        derived = probe_result.derived_numbers(result)  # type: ignore[arg-type]
    finally:
        probe_result.mfu_numbers = orig
    gap = next(d for d in derived if d.name == "comparison_gap")
    assert gap.value is None and gap.no_interval_reason == f"no comparison: {note}"
    assert "12.7" not in gap.text() and gap.text().startswith("comparison_gap: unknown (no comparison:")
    assert gap.to_dict()["comparison_gap_unit"] == "points"


@pytest.mark.parametrize("unit,expected", [("share", "fraction"), ("points", "points")])
def test_derived_json_names_its_unit(unit: str, expected: str) -> None:
    from tuneproof.measure.probe_result import Derived

    assert (
        Derived(name="x", value=0.5, interval=None, no_interval_reason="why", unit=unit).to_dict()["x_unit"]
        == expected
    )
