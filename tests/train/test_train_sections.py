"""The train report's measured sections: the probe's widths span the run's, the scaling plot draws
the fit it reports (constant included)."""

from __future__ import annotations

import pytest

from tuneproof.core.report import section_plots
from tuneproof.measure.probe import span_widths as probe_widths


def test_probe_widths_span_the_run_by_four_from_its_widest() -> None:
    assert probe_widths([31, 40, 512]) == (31, 126, 512)  # the narrowest is below a quarter: kept
    assert probe_widths([300, 400, 512]) == (128, 256, 512)  # a quarter of the widest
    assert probe_widths([20, 64]) == (16, 32, 64)  # never below 16 tokens
    assert probe_widths([8, 40]) is None  # too narrow for a 4x span above 16 tokens
    assert probe_widths([64]) == (16, 32, 64)


def _probe(c: float) -> dict:
    return {
        "fit": {
            "A": 1e-3, "B": 1e-6, "C": c, "model": "t = C + A*w + B*w^2 (NNLS)",
            "medians_s": {"100": 0.2, "400": 0.6}, "quad_share": {"100": 0.1, "400": 0.3},
        },
        "points": [
            {"width": 100, "median_s": 0.2, "median_ci_s": [0.19, 0.22], "times_s": [0.18, 0.2, 0.25]},
            {"width": 400, "median_s": 0.6, "median_ci_s": None, "times_s": [0.55, 0.6, 0.7]},
        ],
        "kernels": {"classes": {"matmul": {"ms": 3.0}}, "source": "cpu_ops"},
    }  # fmt: skip


@pytest.mark.parametrize("c", [0.0, 0.05])
def test_the_scaling_plot_draws_the_fit_with_its_constant(c: float) -> None:
    (plot, _) = section_plots({"probe": _probe(c)}, "x")
    fit = plot.series["fit"]
    for x, y in zip(fit["x"], fit["y"], strict=True):
        assert y == pytest.approx(c + 1e-3 * x + 1e-6 * x * x)
    assert ("constant part C" in plot.series) == bool(c)
    assert ("C = 0.05 s" in plot.note) == bool(c)


def test_samplers_without_roots_draw_padding_only_and_say_why() -> None:
    batching = {"samplers": {"random": {"padding_fraction": 0.3, "roots_per_window": None}}}
    (plot,) = section_plots({"batching": batching}, "the run's own lengths")
    assert list(plot.series) == ["padding fraction"] and "no source-document ids" in plot.note
    batching["samplers"]["random"]["roots_per_window"] = 5.0
    (plot,) = section_plots({"batching": batching}, "x")
    assert list(plot.series) == ["padding fraction", "roots per window"]
    assert plot.note.startswith("roots per window: distinct source documents per gradient-accumulation")


def test_the_measured_points_carry_their_median_interval_or_their_range() -> None:
    (plot, kernels) = section_plots({"probe": _probe(0.0)}, "x")
    (label,) = [k for k in plot.series if k.startswith("measured median")]
    assert label == "measured median (bars: min-max)"  # one width has no interval: the range for all
    measured = plot.series[label]
    assert (measured["low"], measured["high"]) == ([0.18, 0.55], [0.25, 0.7])
    assert "width 400" in kernels.title and "at the widest probed width" in kernels.note


def test_the_report_probe_times_the_runs_own_lora_targets() -> None:
    """The report's probe timed LoRA on every linear whatever the recipe adapted."""
    from tuneproof.arch import resolve
    from tuneproof.commands.train import run_targets

    tiny = resolve("tiny")
    assert run_targets(tiny, "all-linear") is None
    assert run_targets(tiny, ["q_proj", "v_proj"]) == ("self_attn.q_proj", "self_attn.v_proj")
    assert run_targets(tiny, ["self_attn.o_proj"]) == ("self_attn.o_proj",)


def test_under_a_run_budget_the_report_probe_starts_only_with_room_for_twice_its_own(monkeypatch) -> None:
    """The load run: train --budget 60 stopped training at 43 s, and the report's probe (given the 17 s
    left) built, warmed up and timed a round (22 s) before refusing its floor: 75 s in all. Without room
    for twice its budget it is not started, and the report says why."""
    from tuneproof.arch import resolve
    from tuneproof.commands import probe, train
    from tuneproof.core.deadline import Deadline
    from tuneproof.runs.recipe import from_dict

    started: list[object] = []
    monkeypatch.setattr(probe, "run", lambda *a, **k: started.append(a))
    recipe = from_dict({"run": {"probe_budget_s": 20}}, "test recipe")
    now = [43.0]
    deadline = Deadline(budget_s=60.0, clock=lambda: now[0], started=0.0)
    got, why = train._probe(resolve("tiny"), recipe, "sdpa", "cpu", [512] * 8, None, deadline)
    assert got is None and not started
    assert why.startswith("17 s of the command's 60 s budget were left, under twice the probe's 20 s")
