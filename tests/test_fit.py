"""The scaling fit on CASE-like synthetic points (../shared/CASE.md section 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tuneproof.cli.app import main
from tuneproof.errors import TuneproofError
from tuneproof.measure import fit_scaling, read_points

A, B = 6.87e-4, 8.85e-8
WIDTHS = (2048, 8192, 16384)  # 8x range, as in the CASE


def case_points(c: float = 0.0, noise: float = 0.001, repeats: int = 5, seed: int = 1):
    rng = np.random.default_rng(seed)
    w = np.repeat(np.array(WIDTHS, dtype=float), repeats)
    t = c + A * w + B * w * w + rng.normal(0, noise, size=w.size)
    return w, t


def test_recovers_case_shares() -> None:
    fit = fit_scaling(*case_points(), at=[16384.0])
    assert fit.quad_share[2048.0] == pytest.approx(0.209, abs=0.005)
    assert fit.quad_share[16384.0] == pytest.approx(0.678, abs=0.005)
    assert fit.a == pytest.approx(A, rel=0.02) and fit.b == pytest.approx(B, rel=0.02)
    lo, hi = fit.quad_share_ci[16384.0]
    assert lo < fit.quad_share[16384.0] < hi and hi - lo < 0.02
    assert max(abs(r) for r in fit.residuals_s) < 0.005


def test_constant_term_detected_only_when_present() -> None:
    absent = fit_scaling(*case_points(c=0.0))
    present = fit_scaling(*case_points(c=0.5))
    assert absent.constant.significant is False and "refuted" in absent.constant.reason
    assert present.constant.significant is True and present.constant.c == pytest.approx(0.5, abs=0.05)


def test_three_rows_cannot_test_the_constant() -> None:
    fit = fit_scaling(*case_points(repeats=1, noise=0.0))
    assert fit.constant.significant is None and "add repeats" in fit.constant.reason
    assert fit.quad_share[16384.0] == pytest.approx(0.678, abs=0.001)


def test_shares_at_extra_widths_and_nonnegativity() -> None:
    w = np.array([1000.0, 2000, 4000, 8000])
    fit = fit_scaling(w, 1e-3 * w, at=[32000.0])  # purely linear: B must be 0, not negative
    assert fit.b == 0 and fit.quad_share[32000.0] == 0


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
    "text,fragment",
    [
        ("width,time\n1,2\n", "missing column seconds"),
        ("width,seconds\n2048,0.5\n8192,-1\n", "points.csv:3: seconds must be > 0"),
        ("width,seconds\n2048,abc\n", "points.csv:2: not numbers"),
        ("", "missing column width, seconds"),
    ],
)
def test_bad_points_files(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(TuneproofError, match=fragment):
        read_points(_csv(tmp_path, text))


def test_fit_command_json(tmp_path: Path, capsys) -> None:
    w, t = case_points()
    p = _csv(tmp_path, "width,seconds\n" + "".join(f"{int(a)},{b}\n" for a, b in zip(w, t, strict=True)))
    assert main(["fit", "--points", str(p), "--at", "32768", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {"A", "B", "residuals_s", "quad_share", "quad_share_ci", "constant"} <= d.keys()
    assert d["quad_share"]["16384"] == pytest.approx(0.678, abs=0.005) and "32768" in d["quad_share"]
    assert d["constant"]["significant"] is False
    assert main(["fit", "--points", str(p)]) == 0
    assert "quadratic share" in capsys.readouterr().out


def test_fit_command_errors(tmp_path: Path, capsys) -> None:
    p = _csv(tmp_path, "width,seconds\n2048,1\n4096,2\n")
    assert main(["fit", "--points", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: 2 distinct width(s)") and err.count("\n") == 1
