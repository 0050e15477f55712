"""The library and the command tell one story: for plan, buckets, probe, fit, kernels and peak, what
`--json` prints is exactly the library result's `to_dict()`.

Two comparisons per command:
- the result the command itself built (its area's `run`, wrapped to keep what it returned) against
  what the command printed: exact, timed numbers included;
- for the deterministic commands (plan --fit, fit, kernels), a result the library builds on its own
  from the same inputs against the command's output: exact too. Buckets times its planners
  (`plan_seconds`), so its independent result is compared with those fields left out; probe and peak
  are timed throughout, so they have the first comparison only.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tuneproof.cli.app import main
from tuneproof.core.io import dumps


def _as_json(result: Any) -> Any:
    """The result's to_dict() as `--json` would write it (tuples as lists, no NaN)."""
    return json.loads(dumps(result.to_dict()))


def _command(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], area: Any,
             argv: list[str]) -> tuple[Any, Any]:  # fmt: skip
    """Run `tuneproof <argv> --json`; return (what it printed, the result its area's `run` returned)."""
    kept: list[Any] = []
    real = area.run

    def keep(*args: Any, **kwargs: Any) -> Any:
        kept.append(real(*args, **kwargs))
        return kept[-1]

    monkeypatch.setattr(area, "run", keep)
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(kept) == 1
    return out, kept[0]


def _points(path: Path) -> Path:
    rng = np.random.default_rng(0)
    rows = [(w, (0.01 + 2e-4 * w + 1e-8 * w * w) * rng.lognormal(0, 0.02)) for w in (512, 2048, 8192)
            for _ in range(8)]  # fmt: skip
    path.write_text("width,seconds\n" + "".join(f"{w},{t!r}\n" for w, t in rows))
    return path


def test_plan_json_is_the_projection_result(monkeypatch, capsys) -> None:
    from tuneproof.commands import plan as area
    from tuneproof.data.compare import CASE_FIT, CASE_FIT_TEXT
    from tuneproof.data.ranks import StepCost

    out, printed = _command(monkeypatch, capsys, area, ["plan", "--fit", CASE_FIT_TEXT, "--ranks", "2"])
    assert out == _as_json(printed)
    spec = area.ProjectionSpec(ranks=2, fit=StepCost(a=CASE_FIT[0], b=CASE_FIT[1]))
    assert out == _as_json(area.run(area.prepare(spec)))


def test_buckets_json_is_the_buckets_result(monkeypatch, capsys) -> None:
    from tuneproof.commands import buckets as area
    from tuneproof.data.compare import CASE_FIT
    from tuneproof.data.ranks import StepCost

    argv = ["buckets", "--ranks", "2", "--sweep", "1,64", "--config", "tiny"]
    out, printed = _command(monkeypatch, capsys, area, argv)
    assert out == _as_json(printed)
    from tuneproof.arch import resolve

    spec = area.BucketsSpec(
        sweep=(1, 64), model=resolve("tiny"), ranks=2, cost=StepCost(a=CASE_FIT[0], b=CASE_FIT[1])
    )
    alone = _as_json(area.run(area.prepare(spec)))

    def untimed(d: dict[str, Any]) -> dict[str, Any]:
        for row in [*d["samplers"].values(), *d["sweep"]]:
            assert row.pop("plan_seconds") >= 0
        return d

    assert untimed(out) == untimed(alone)


def test_probe_json_is_the_probe_result(monkeypatch, capsys, tmp_path: Path) -> None:
    from tuneproof.commands import probe as area

    argv = ["probe", "--widths", "64,128,256", "--mode", "forward", "--budget", "1", "--profiles", "2",
            "--over-budget", "floor", "--out", str(tmp_path / "out")]  # fmt: skip
    out, printed = _command(monkeypatch, capsys, area, argv)
    assert out == _as_json(printed)
    assert json.loads((tmp_path / "out" / "probe.json").read_text()) == out  # the file says the same


def test_fit_json_is_the_scaling_fit(monkeypatch, capsys, tmp_path: Path) -> None:
    from tuneproof.commands import fit as area

    points = _points(tmp_path / "points.csv")
    out, printed = _command(monkeypatch, capsys, area, ["fit", "--points", str(points), "--at", "16384"])
    assert out == _as_json(printed)
    assert out == _as_json(area.run(area.prepare(area.FitSpec(points=points, at=(16384,)))))


def test_kernels_json_is_the_kernel_table(monkeypatch, capsys, tmp_path: Path) -> None:
    from tuneproof.commands import kernels as area

    events = [
        {"ph": "X", "cat": "kernel", "name": n, "ts": ts, "dur": dur}
        for n, ts, dur in (("flash_fwd_kernel", 0, 50), ("sm80_xmma_gemm", 60, 30), ("memcpy", 95, 5))
    ]
    trace = tmp_path / "trace.json.gz"
    trace.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    out, printed = _command(monkeypatch, capsys, area, ["kernels", "--trace", str(trace), "--top", "2"])
    assert out == _as_json(printed)
    assert out == _as_json(area.run(area.prepare(area.KernelsSpec(trace=trace, top_n=2))))


def test_peak_json_is_the_measured_peak(monkeypatch, capsys) -> None:
    from tuneproof.commands import peak as area

    argv = ["peak", "--device", "cpu", "--dtype", "fp32", "--max-seconds", "0.05"]
    out, printed = _command(monkeypatch, capsys, area, argv)
    assert out == _as_json(printed)
    assert out["label"] == "measured peak" and out["device"] == "cpu" and out["dtype"] == "fp32"
