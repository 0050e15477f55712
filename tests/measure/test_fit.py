"""The scaling fit on CASE-like points (docs/reference-run.md section 2), and the examples of the trust
issue that the old fit got wrong, each with the numbers the old code printed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fakes import A, B, FakeClock, case_time
from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError
from tuneproof.measure import fit_scaling, judge_constant, read_points, time_interleaved

WIDTHS = (2048, 8192, 16384)  # 8x range, as in the CASE


def case_points(c: float = 0.0, noise: float = 0.001, repeats: int = 6, seed: int = 1):
    rng = np.random.default_rng(seed)
    w = np.repeat(np.array(WIDTHS, dtype=float), repeats)
    t = c + A * w + B * w * w + rng.normal(0, noise, size=w.size)
    return w, t


def rows(widths: tuple[float, ...], times: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    w = np.concatenate([[x] * len(t) for x, t in zip(widths, times, strict=True)]).astype(float)
    return w, np.concatenate([np.asarray(t, dtype=float) for t in times])


def test_recovers_case_shares() -> None:
    fit = fit_scaling(*case_points(), at=[16384.0])
    assert fit.quad_share[2048.0] == pytest.approx(0.209, abs=0.005)
    assert fit.quad_share[16384.0] == pytest.approx(0.678, abs=0.005)
    assert fit.a == pytest.approx(A, rel=0.02) and fit.b == pytest.approx(B, rel=0.02)
    assert fit.quad_share_ci is not None
    lo, hi = fit.quad_share_ci[16384.0]
    assert lo < fit.quad_share[16384.0] < hi and hi - lo < 0.02
    assert max(abs(r) for r in fit.residuals_s) < 0.005
    assert fit.constant.verdict == "absent" and not fit.constant_in_model  # the CASE: no constant term
    assert fit.fitted(16384.0) == pytest.approx(fit.a * 16384 + fit.b * 16384**2)
    assert fit.fitted(2.0) == fit.a * 2.0 + fit.b * 4.0


def test_constant_present_absent_undetermined() -> None:
    absent = fit_scaling(*case_points(c=0.0))
    present = fit_scaling(*case_points(c=0.5))
    noisy = fit_scaling(*case_points(c=0.05, noise=0.2, seed=4))
    assert absent.constant.verdict == "absent" and "refuted" in absent.constant.reason
    assert present.constant.verdict == "present" and present.constant.c == pytest.approx(0.5, abs=0.05)
    assert present.fitted(3.0) == present.c + present.a * 3.0 + present.b * 9.0 and present.c > 0.4
    assert present.constant_in_model and present.quad_share[16384.0] == pytest.approx(
        B * 16384**2 / case_time(16384, 0.5), abs=0.01
    )
    assert noisy.constant.verdict == "undetermined" and "refuted" not in noisy.constant.reason
    assert noisy.constant.repeats_to_decide and "repeats per width would decide it" in noisy.constant.reason
    assert noisy.constant_in_model  # an unproven "no overhead" is never assumed


@pytest.mark.parametrize(
    "c,interval,verdict",
    [
        (0.5, (0.45, 0.55), "present"),
        (0.0, (-0.05, 0.05), "absent"),
        (0.0, (-0.2, 0.2), "undetermined"),
        (0.12, (0.05, 0.2), "undetermined"),  # above 0 but not above the margin
        (-0.5, (-0.6, -0.4), "undetermined"),  # negative: the model does not fit
        (0.09, (-0.01, 0.101), "undetermined"),  # one end just outside the margin
    ],
)
def test_constant_verdicts_at_their_edges(c: float, interval: tuple[float, float], verdict: str) -> None:
    assert judge_constant(c, interval, margin=0.1, repeats=6).verdict == verdict


def test_repeats_to_decide_scale_with_the_square_of_the_interval() -> None:
    t = judge_constant(0.0, (-0.2, 0.2), margin=0.1, repeats=6)
    # half-width 0.2 must shrink to 0.1 / (1 + z_0.8 / z_0.975) for an 80 % chance to decide: 8.2x the repeats
    assert t.repeats_to_decide == 50
    assert judge_constant(0.0, (-0.11, 0.11), margin=0.1, repeats=6).repeats_to_decide == 15
    # never the count already taken: an interval just over the band still asks for one more
    assert judge_constant(0.0, (-0.101, 0.05), margin=0.1, repeats=6).repeats_to_decide >= 7


def test_example_one_outlier_no_longer_makes_everything_quadratic() -> None:
    """Issue example: one repeat of 5.93 s among 0.54-0.61 s. The old fit (NNLS on every row) printed
    a 100.0 % quadratic share at every width. Truth here: 50 % at 4096."""
    a, b = 0.285 / 4096, 0.285 / 4096**2
    widths = (1024.0, 2048.0, 4096.0)
    base = [[a * w + b * w * w] * 6 for w in widths]
    base[2] = [0.54, 0.61, 5.93, 0.57, 0.56, 0.58]
    fit = fit_scaling(*rows(widths, base))
    assert fit.outliers[4096.0] == [5.93]
    assert fit.quad_share[4096.0] == pytest.approx(0.5, abs=0.03)
    assert fit.quad_share[1024.0] < 0.25


def test_example_boundary_b_zero_gets_an_honest_upper_bound() -> None:
    """Issue example: B = 0 at the NNLS boundary with a bootstrap interval of [0, 0]. These noisy,
    nearly linear timings give B = 0; the interval must still say how much quadratic work the noise
    allows. The old code also called the constant 'refuted' with SE 0.11 > |C| = 0.023."""
    rng = np.random.default_rng(5)
    widths = (1024.0, 2048.0, 4096.0)
    times = [list(3.3e-4 * w + 2e-9 * w * w + 3.3e-4 * w * 0.08 * rng.standard_normal(6)) for w in widths]
    fit = fit_scaling(*rows(widths, times))
    assert fit.b == 0.0 and fit.quad_share[4096.0] == 0.0
    assert fit.quad_share_ci is not None
    lo, hi = fit.quad_share_ci[4096.0]
    assert lo == 0.0 and hi > 0.1
    assert fit.constant.verdict == "undetermined" and "refuted" not in fit.constant.reason


def test_example_refuted_with_a_huge_standard_error_is_now_undetermined() -> None:
    """Issue example: 'C = 5.34 s is not distinguishable from 0 (SE 2.5): the launch-/host-bound
    hypothesis is refuted'. Noise that large decides nothing."""
    rng = np.random.default_rng(0)
    widths = (1024.0, 2048.0, 4096.0)
    times = [list(0.35 * (w / 1024) * (1 + 0.6 * np.abs(rng.standard_normal(6)))) for w in widths]
    fit = fit_scaling(*rows(widths, times))
    assert fit.constant.verdict == "undetermined"
    assert "refuted" not in fit.constant.reason and "too wide" in fit.constant.reason


def test_example_a_burst_no_longer_fakes_a_constant() -> None:
    """Issue example: under load 'C = 2.49 s is distinguishable from 0 ... (launch- or host-bound)'.
    A neighbour's burst that lasts while one width is timed bends a width-by-width measurement into a
    constant term; interleaved timing spreads it over every width, and the outlier rule drops it."""

    def machine(clock: FakeClock):
        def step(w: int):
            def run() -> None:
                busy = clock.now < 20.0  # a 20 s burst at the start
                clock.now += case_time(w) * (2.5 if busy else 1.0)

            return run

        return step

    widths = (2048, 8192, 16384)
    one_by_one = FakeClock()
    step = machine(one_by_one)
    sequential = {
        w: time_interleaved(
            {w: step(w)}, warmup=0, min_repeats=6, max_repeats=6, budget_s=1e6, clock=one_by_one
        )
        for w in widths
    }
    seq = fit_scaling(
        *rows(tuple(map(float, widths)), [list(sequential[w].timings[w].times_s) for w in widths])
    )
    clock = FakeClock()
    inter = time_interleaved(
        {w: machine(clock)(w) for w in widths},
        warmup=0,
        min_repeats=6,
        max_repeats=10,
        budget_s=1e6,
        clock=clock,
    )
    fit = fit_scaling(*rows(tuple(map(float, widths)), [list(inter.timings[w].times_s) for w in widths]))
    assert seq.constant.verdict != "absent"  # the burst on the first width looks like overhead
    assert fit.constant.verdict == "absent" and fit.quad_share[16384.0] == pytest.approx(0.678, abs=0.01)
    assert sum(t.num_outliers for t in inter.timings.values()) == 2  # the burst's two repeats, set aside


def test_three_rows_are_decided_from_the_two_term_residuals() -> None:
    """Three noise-free rows on t = A*w + B*w^2: the old fit gave no interval ('needs 6') and an
    undetermined constant; the two-term fit's residual (zero) now shows the constant absent."""
    fit = fit_scaling(*case_points(repeats=1, noise=0.0))
    assert fit.constant.verdict == "absent" and not fit.constant_in_model
    assert fit.quad_share[16384.0] == pytest.approx(0.678, abs=0.001)
    assert fit.quad_share_ci is not None and fit.ci_reason is None
    lo, hi = fit.quad_share_ci[16384.0]
    assert hi - lo < 1e-6 and lo == pytest.approx(fit.quad_share[16384.0], abs=1e-6)


def test_shares_at_extra_widths_and_nonnegativity() -> None:
    w = np.repeat([1000.0, 2000, 4000, 8000], 6)
    fit = fit_scaling(w, 1e-3 * w, at=[32000.0])  # purely linear: B must be 0, not negative
    assert fit.b == pytest.approx(0.0, abs=1e-15) and fit.quad_share[32000.0] == pytest.approx(0.0, abs=1e-9)


def test_a_model_that_does_not_fit_gives_no_interval() -> None:
    w = np.repeat([1024.0, 2048.0, 4096.0], 6)
    t = np.repeat([1.0, 0.5, 2.0], 6) * (1 + 0.001 * np.arange(18) % 3)  # 2048 faster than 1024
    fit = fit_scaling(w, t)
    assert fit.quad_share_ci is None and fit.num_bootstrap == 0
    assert fit.ci_reason == (
        "A negative beyond the noise: the timings do not follow C + A*w + B*w^2, so no interval is given"
    )
    t = np.repeat([2.0, 3.9, 4.0], 6) * (1 + 0.001 * np.arange(18) % 3)  # flattening: C and B < 0
    assert fit_scaling(w, t).ci_reason == (
        "C and B negative beyond the noise: the timings do not follow C + A*w + B*w^2, "
        "so no interval is given"
    )
    t = (1e-3 * w - 5e-8 * w * w) * (1 + 0.0001 * (np.arange(18) % 3))  # no constant, B < 0
    fit = fit_scaling(w, t)
    assert not fit.constant_in_model and fit.ci_reason == (
        "B negative beyond the noise: the timings do not follow A*w + B*w^2, so no interval is given"
    )
    assert fit.widths == [1024.0, 2048.0, 4096.0]


@pytest.mark.parametrize(
    "widths,fragment",
    [
        ([1000, 2000], "at least 3"),
        ([1000, 1500, 2000], "span 2.00x"),
    ],
)
def test_too_few_or_too_close_widths(widths: list[int], fragment: str) -> None:
    w = np.array(widths, dtype=float)
    with pytest.raises(TuneproofError, match=fragment.replace(".", r"\.")):
        fit_scaling(w, 1e-3 * w)


def _csv(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "points.csv"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text,message",
    [
        (
            "width,time\n1,2\n",
            "{p}: missing column seconds (header: width,time) (the first line must be 'width,seconds')",
        ),
        ("", "{p}: missing column width, seconds (header: none) (the first line must be 'width,seconds')"),
        (
            "width,seconds\n2048,0.5\n8192,-1\n",
            "{p}:3: seconds must be in [1e-09, 1e+07], got -1"
            " (a step time is positive; drop or re-measure that row)",
        ),
        (
            "width,seconds\n2048,0\n",
            "{p}:2: seconds must be in [1e-09, 1e+07], got 0"
            " (a step time is positive; drop or re-measure that row)",
        ),
        (
            "width,seconds\n2048,abc\n",
            "{p}:2: not a finite number: seconds 'abc' (each row is an integer width and a time in seconds)",
        ),
        (
            "width,seconds\nx,nan\n",
            "{p}:2: not a finite number: width 'x', seconds 'nan'"
            " (each row is an integer width and a time in seconds)",
        ),
        (
            "width,seconds\n2048.5,1\n",
            "{p}:2: width must be a positive integer up to 1,073,741,824, got 2048.5 (fix that row)",
        ),
        (
            "width,seconds\n0,1\n",
            "{p}:2: width must be a positive integer up to 1,073,741,824, got 0 (fix that row)",
        ),
        (
            "width,seconds\n100000000000000000000000,3\n",
            "{p}:2: width must be a positive integer up to 1,073,741,824, got 100000000000000000000000"
            " (fix that row)",
        ),
        (
            "width,seconds\n1000,1e200\n",
            "{p}:2: seconds must be in [1e-09, 1e+07], got 1e200"
            " (a step time is positive; drop or re-measure that row)",
        ),
        ("width,seconds\n", "{p} holds no rows (one 'width,seconds' row per timed repeat)"),
    ],
)
def test_bad_points_files(tmp_path: Path, text: str, message: str) -> None:
    path = _csv(tmp_path, text)
    with pytest.raises(TuneproofError) as e:
        read_points(path)
    assert e.value.message == message.format(p=path)


def test_points_file_width_one_and_missing_file(tmp_path: Path) -> None:
    widths, seconds = read_points(_csv(tmp_path, "width,seconds\n1,0.25\n"))
    assert widths.tolist() == [1.0] and seconds.tolist() == [0.25]
    with pytest.raises(TuneproofError) as e:
        read_points(tmp_path / "nope.csv")
    assert e.value.message == (
        f"points file not found: {tmp_path / 'nope.csv'} (pass a CSV with a 'width,seconds' header)"
    )


def test_fit_command_json(tmp_path: Path, capsys) -> None:
    w, t = case_points()
    p = _csv(tmp_path, "width,seconds\n" + "".join(f"{int(a)},{b}\n" for a, b in zip(w, t, strict=True)))
    assert main(["fit", "--points", str(p), "--at", "32768", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {"A", "B", "C", "residuals_s", "quad_share", "quad_share_ci", "constant", "medians_s"} <= d.keys()
    assert d["quad_share"]["16384"] == pytest.approx(0.678, abs=0.005) and "32768" in d["quad_share"]
    assert d["constant"]["verdict"] == "absent"
    assert main(["fit", "--points", str(p)]) == 0
    assert "quadratic share" in capsys.readouterr().out


def test_fit_command_errors(tmp_path: Path, capsys) -> None:
    p = _csv(tmp_path, "width,seconds\n2048,1\n4096,2\n")
    assert main(["fit", "--points", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: 2 distinct width(s)") and err.count("\n") == 1


@pytest.mark.parametrize(
    "widths,seconds",
    [
        ([1e23, 4e23, 16e23], [1.0, 2.0, 3.0]),
        ([1e3, 4e3, 16e3], [1e200, 1.0, 2.0]),
        ([1e3, 4e3, 16e3], [1e-300] * 3),
    ],
)
def test_out_of_range_rows_are_refused_not_a_singular_matrix(
    widths: list[float], seconds: list[float]
) -> None:
    """Fresh eyes: width 1e23 or seconds 1e200 ended in numpy's LinAlgError traceback."""
    with pytest.raises(
        TuneproofError, match=r"widths must be <= 1,073,741,824 and seconds in \[1e-09, 1e\+07\]"
    ):
        fit_scaling(np.array(widths), np.array(seconds))


def test_c_below_0_beyond_the_noise_is_said_as_such_not_too_wide() -> None:
    """Fresh eyes (issue 33): C's interval [-0.169, -0.013] against a margin of 0.077 read "the interval
    is too wide to say" beside a share line saying C is negative beyond the noise."""
    t = judge_constant(-0.0912, (-0.169, -0.013), margin=0.0771, repeats=3)
    assert t.verdict == "undetermined" and "too wide" not in t.reason
    assert "C is below 0 beyond the noise" in t.reason and t.reason.endswith("repeats would tell which")
