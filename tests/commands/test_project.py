"""`tuneproof plan`: the projection by hand, the CASE's fit on the shipped lengths, epochs, measured
points with their interval, extrapolation named, and bad input refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError
from tuneproof.data import synthetic_lengths
from tuneproof.data.ranks import StepCost
from tuneproof.measure.projection import project
from tuneproof.measure.step_model import StepModel

CASE = StepModel(cost=StepCost(a=6.87e-4, b=8.85e-8))


def test_a_projection_by_hand() -> None:
    lengths = np.array([10] * 8)
    (p,) = project(
        lengths, 2, 2, StepModel(cost=StepCost(a=1.0, b=0.0)), samplers=("ours",), step_overhead_s=0.5
    )
    # 4 micro-batches of 2 sequences x 10 tokens x 1 s/token, 2 optimizer steps of 0.5 s overhead
    assert (p.wall_s, p.steps, p.micro_batches, p.tokens, p.utilisation) == (81.0, 2, 4, 80, 1.0)
    (two,) = project(lengths, 2, 1, StepModel(cost=StepCost(a=1.0, b=0.0)), ranks=2, samplers=("ours",))
    assert (two.wall_s, two.steps) == (40.0, 2)  # two ranks share the work, nobody waits


def test_the_case_fit_on_the_shipped_lengths_ours_against_random() -> None:
    lengths, _ = synthetic_lengths()
    got = {p.sampler: p for p in project(lengths, 2, 16, CASE, samplers=("ours", "random"))}
    assert got["ours"].wall_s / 3600 == pytest.approx(7.62, abs=0.01)  # the CASE's run took 7.36 h
    assert got["random"].wall_s > 1.6 * got["ours"].wall_s
    assert got["ours"].tokens == got["random"].tokens == int(lengths.sum())
    assert got["ours"].steps == 625 and got["ours"].wall_s_ci95 is None


def test_epochs_multiply_and_a_fraction_takes_the_first_steps() -> None:
    lengths, _ = synthetic_lengths()
    one, two, half = (project(lengths, 2, 4, CASE, epochs=e, samplers=("ours",))[0] for e in (1.0, 2.0, 0.5))
    assert two.steps == 2 * one.steps and two.wall_s == pytest.approx(2 * one.wall_s, rel=1e-3)
    assert half.steps == one.steps // 2 and half.wall_s == pytest.approx(one.wall_s / 2, rel=0.05)


def _points(widths: list[int], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = np.repeat(widths, 8).astype(float)
    t = (0.01 + 2e-4 * w + 1e-8 * w * w) * rng.lognormal(0, 0.02, w.size)
    return w, t


def test_measured_points_give_an_interval_and_name_the_extrapolation() -> None:
    lengths, _ = synthetic_lengths()
    model = StepModel.from_points(*_points([512, 2048, 8192]), batch=2)
    assert model.cost.b == pytest.approx(1e-8, rel=0.2) and len(model.replicates) > 100
    (p,) = project(lengths, 2, 1, model, samplers=("ours",))
    lo, hi = p.wall_s_ci95
    assert lo < p.wall_s < hi and (hi - lo) < 0.2 * p.wall_s
    assert 0 < p.extrapolated_share < 1 and p.widest == 16384  # widths beyond 8,192 and below 512
    wide = StepModel.from_points(*_points([32, 1024, 16384]), batch=2)
    assert project(lengths, 2, 1, wide, samplers=("ours",))[0].extrapolated_share == 0


def test_lengths_that_do_not_fill_one_step_are_refused() -> None:
    with pytest.raises(TuneproofError, match="do not fill one optimizer step"):
        project(np.array([5, 6, 7]), 2, 1, CASE, ranks=2)


def test_plan_json_carries_every_sampler(capsys) -> None:
    assert main(["plan", "--fit", "6.87e-4,8.85e-8", "--ranks", "8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d["samplers"]) == {"ours", "random", "hf-length-grouped", "packing"}
    for p in d["samplers"].values():
        assert {"wall_s", "wall_s_ci95", "steps", "utilisation", "tokens"} <= p.keys()
    assert d["samplers"]["ours"]["utilisation"] >= 0.97 > 0.3 > d["samplers"]["random"]["utilisation"]
    assert d["step_cost"]["no_interval"].startswith("a fit given as numbers")


def test_plan_from_points_says_it_extrapolates_and_by_how_far(tmp_path: Path, capsys) -> None:
    w, t = _points([512, 2048, 8192])
    csv = tmp_path / "points.csv"
    csv.write_text("width,seconds\n" + "".join(f"{int(a)},{b}\n" for a, b in zip(w, t, strict=True)))
    assert main(["plan", "--points", str(csv), "--sampler", "ours", "--gpu-hour-cost", "2"]) == 0
    out = capsys.readouterr().out
    assert "at widths outside the measured 512-8,192" in out and "2.0x the widest measured" in out
    assert "$" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "give the step cost one way"),
        (["--fit", "1e-4,1e-8", "--probe"], "not --fit and --probe"),
        (["--fit", "-1e-4,1e-8"], "--fit: step-cost term a is -0.0001"),
        (["--fit", "1e-4,1e-8", "--ranks", "0"], "--ranks must be >= 1"),
        (["--fit", "1e-4,1e-8", "--sampler", "ours,fast"], "--sampler 'fast' is not known"),
        (["--fit", "1e-4,1e-8", "--ranks", "30000", "--micro-batch", "1"], "do not fill one optimizer step"),
    ],
)
def test_bad_plans_are_refused(args: list[str], needle: str, capsys) -> None:
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


def test_the_fastest_is_named_only_when_the_projection_can_tell() -> None:
    from tuneproof.measure.projection import Projection, fastest

    def proj(name: str, wall: float, ci: tuple[float, float] | None) -> Projection:
        return Projection(
            sampler=name,
            wall_s=wall,
            wall_s_ci95=ci,
            steps=10,
            micro_batches=10,
            tokens=100,
            utilisation=1.0,
            epochs=1.0,
        )

    measured = StepModel.from_points(*_points([512, 2048, 8192]), batch=2)
    apart = [proj("ours", 10.0, (9.0, 11.0)), proj("random", 20.0, (18.0, 22.0))]
    assert fastest(apart, measured).startswith("the fastest, ours, saves")
    close = [proj("ours", 10.0, (9.0, 11.0)), proj("random", 10.5, (10.0, 12.0))]
    assert fastest(close, measured) == "no sampler named fastest: the intervals overlap (inconclusive)"
    unmeasured = StepModel(
        cost=measured.cost,
        replicates=[],
        measured=(512, 8192),
        source="probe",
        no_interval="2 kept repeat(s) at a width",
    )
    assert fastest(apart, unmeasured) == "no sampler named fastest: 2 kept repeat(s) at a width"
    assert fastest(apart, CASE).endswith("(under this fit)")
    packed = [proj("packing", 5.0, None), proj("ours", 10.0, None)]
    assert "assumes a document-masked kernel" in fastest(packed, CASE)  # else SDPA pays the whole square
    assert "document-masked" not in fastest(apart, CASE)


def test_points_beside_a_probe_json_take_its_batch(tmp_path: Path, capsys) -> None:
    w, t = _points([512, 2048, 8192])
    (tmp_path / "points.csv").write_text(
        "width,seconds\n" + "".join(f"{int(a)},{b}\n" for a, b in zip(w, t, strict=True))
    )
    (tmp_path / "probe.json").write_text(json.dumps({"spec": {"batch": 1}}))
    assert main(["plan", "--points", str(tmp_path / "points.csv"), "--sampler", "ours", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["step_cost"]["batch"] == 1 and "timed at batch 1" in d["step_cost"]["source"]
    (tmp_path / "probe.json").unlink()
    assert main(["plan", "--points", str(tmp_path / "points.csv"), "--sampler", "ours", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_cost"]["batch"] == 2  # --micro-batch, and said so


def test_too_little_to_plan_is_refused_by_plan_and_buckets(capsys) -> None:
    assert main(["plan", "--fit", "1e-4,1e-8", "--epochs", "1e-9"]) == 2
    assert "is less than one optimizer step (an epoch is 10000 steps)" in capsys.readouterr().err


@pytest.mark.slow  # a probe and a few Trainer steps
def test_plan_probe_json_is_one_json_object(tmp_path: Path, capsys) -> None:
    (tmp_path / "l.txt").write_text("".join(f"{n}\n" for n in range(20, 260, 3)))
    args = ["plan", "--probe", "--probe-budget", "2", "--lengths", str(tmp_path / "l.txt"), "--json"]
    code = main(args)
    if code == 2 and "do not grow with width" in capsys.readouterr().err:
        pytest.skip(
            "a 2 s probe on a loaded machine: the timing noise covered the widths (refused, as it should)"
        )
    assert code == 0
    d = json.loads(capsys.readouterr().out)  # nothing else on stdout: the Trainer's own prints are off
    assert d["step_overhead_source"] == "measured by the probe" and d["step_overhead_s"] >= 0
    assert d["step_cost"]["source"].startswith("probe of embedded tiny")


def test_the_probe_stops_at_the_models_positions_and_the_plan_extrapolates_past_them() -> None:
    """`plan --probe` with its defaults (tiny, 4,096 positions; the shipped lengths reach 16,384) was
    always refused: it now times up to 4,096 and names the extrapolation."""
    from tuneproof.arch import resolve
    from tuneproof.data import synthetic_lengths
    from tuneproof.measure.step_model import probe_spec

    lengths, _ = synthetic_lengths()
    tiny = resolve("tiny")
    spec = probe_spec(tiny, "sdpa", "forward", 2, 5.0, 0, lengths)
    assert max(spec.widths) == tiny.max_positions == 4096 < int(lengths.max())


def test_a_trainer_step_probe_names_the_train_extra_before_any_work(monkeypatch) -> None:
    import importlib.util

    from tuneproof.arch import resolve
    from tuneproof.core.errors import TuneproofError
    from tuneproof.data import synthetic_lengths
    from tuneproof.measure.step_model import probe_spec

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "accelerate" else real(n, *a))
    lengths, _ = synthetic_lengths()
    with pytest.raises(TuneproofError, match=r"needs accelerate.*pip install 'tuneproof\[train\]'"):
        probe_spec(resolve("tiny"), "sdpa", "full", 2, 5.0, 0, lengths)


def test_timings_that_do_not_grow_with_width_say_so(tmp_path: Path, capsys) -> None:
    """Under load a short probe can time every width alike: the fit's A and B come out 0, and the refusal
    says what that means, not "step-cost terms a and b are both 0"."""
    points = tmp_path / "points.csv"
    points.write_text(
        "width,seconds\n"
        + "".join(f"{w},{0.5 - 1e-6 * w + 1e-5 * i}\n" for i, w in enumerate([512, 1024, 2048] * 4))
    )
    (tmp_path / "l.txt").write_text("".join(f"{n}\n" for n in range(20, 260, 3)))
    code = main(["plan", "--points", str(points), "--lengths", str(tmp_path / "l.txt"), "--sampler", "ours"])
    err = capsys.readouterr().err
    assert code == 2 and "do not grow with width across 512-2,048 tokens" in err and err.count("\n") == 1
