"""Backends judged against fp32 truth: the verdict pinned with fakes whose answer is known, then the
real thing on the embedded tiny model (CPU)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
import torch

from tuneproof.arch import resolve
from tuneproof.cli.app import main
from tuneproof.commands import adjudicate
from tuneproof.commands.adjudicate import AdjudicateSpec, Diff, judge_width, paired_halfwidth, prepare, run
from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import RecordedProgress


def test_diff_reports_max_and_mean() -> None:
    d = Diff.of(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.5, 1.0]))
    assert (d.max_abs, d.mean_abs) == (2.0, pytest.approx(2.5 / 3))
    many = Diff.of_many({"a": torch.zeros(2), "b": torch.ones(2)}, {"a": torch.ones(2), "b": torch.ones(2)})
    assert (many.max_abs, many.mean_abs) == (1.0, 0.5)


def test_closest_is_the_smallest_error_beyond_the_noise() -> None:
    v = judge_width(
        256, {"sdpa": [3.0, 3.1, 2.9], "flex_attention": [2.0, 2.1, 1.9], "eager": [5.0, 5.2, 4.8]}
    )
    assert (v.outcome, v.choice, v.tied) == ("closest", "flex_attention", ())
    assert v.margin == pytest.approx(1.0) and v.noise == pytest.approx(0.0, abs=1e-9)
    assert v.errors == pytest.approx({"sdpa": 3.0, "flex_attention": 2.0, "eager": 5.0})
    assert "flex_attention is closest" in v.reason and "below sdpa" in v.reason


def test_a_difference_inside_its_own_spread_is_a_tie() -> None:
    v = judge_width(256, {"sdpa": [2.0, 3.0, 1.0], "flex_attention": [2.5, 1.6, 1.8]})
    assert v.outcome == "tied" and v.choice == "flex_attention" and v.tied == ("sdpa",)
    assert v.margin == pytest.approx(2.0 - 5.9 / 3) and v.noise is not None and v.noise > abs(v.margin)


def test_one_batch_gives_no_verdict() -> None:
    v = judge_width(256, {"sdpa": [3.0], "eager": [2.0]})
    assert v.outcome == "inconclusive" and v.choice == "eager" and v.noise is None
    assert "one batch gives no spread" in v.reason


def test_nothing_measurable() -> None:
    assert judge_width(64, {}).outcome == "inconclusive"
    assert judge_width(64, {"sdpa": [1.0, 2.0]}).outcome == "inconclusive"


def test_paired_interval() -> None:
    assert paired_halfwidth([1.0]) is None
    assert paired_halfwidth([1.0, 3.0]) == pytest.approx(12.7062047 * (2**0.5) / (2**0.5))  # t(1 df)
    assert paired_halfwidth([2.0, 2.0, 2.0]) == 0.0


@pytest.mark.slow
def test_adjudicate_states_its_criterion_and_judges_each_width(capsys) -> None:
    args = ["adjudicate", "--widths", "64,160", "--backends", "sdpa,flex_attention,eager", "--samples", "2"]
    assert main([*args, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["criterion"] == "logits" and "mean |logit - fp32 truth|" in d["criterion_definition"]
    assert d["samples"] == 2 and set(d["verdicts"]) == {"64", "160"}
    for v in d["verdicts"].values():
        assert v["outcome"] in ("closest", "tied", "inconclusive")
        assert set(v["mean_error"]) == {"sdpa", "flex_attention", "eager"}
    rows = {(r["backend"], r["width"], r["sample"]): r for r in d["results"]}
    assert len(rows) == 12
    for (backend, _, _), r in rows.items():
        assert r["logits"]["max_abs"] >= r["logits"]["mean_abs"] > 0  # bf16 is never exactly fp32
        if backend == "flex_attention":
            assert r["grads"] is None and "no backward on CPU" in r["grads_note"]
        else:
            assert r["grads"]["mean_abs"] > 0
    assert rows[("sdpa", 160, 0)]["logits"] != rows[("eager", 160, 0)]["logits"]  # each measured
    assert rows[("sdpa", 160, 0)]["logits"] != rows[("sdpa", 160, 1)]["logits"]  # batches differ
    assert any("forward only" in n for n in d["notes"])


def test_gradients_as_the_criterion_leave_out_backends_without_a_backward() -> None:
    spec = AdjudicateSpec(
        widths=(64,), backends=("sdpa", "flex_attention", "eager"), criterion="grads", samples=2
    )
    result = run(prepare(replace(spec, model=resolve("tiny"))))
    v = result.judge(64)
    assert set(v.errors) == {"sdpa", "eager"}
    assert any("no part in the grads verdict" in n for n in result.notes)


@pytest.mark.parametrize(
    "kw,fragment",
    [
        ({"backends": ("flex_attention",), "grads": "on"}, "backward requested for flex_attention on CPU"),
        ({"backends": ("xformers",)}, "backends 'xformers' is not known"),
        ({"backends": ("flash_attention_2",)}, "backends 'flash_attention_2' is not known"),
        ({"backends": ()}, "backends is empty"),
        ({"dtype": "fp32"}, "dtype 'fp32' is not known"),
        ({"grads": "maybe"}, "grads 'maybe' is not known"),
        ({"criterion": "vibes"}, "criterion 'vibes' is not known"),
        ({"criterion": "grads", "grads": "off"}, "criterion grads with grads off"),
        ({"samples": 0}, "samples must be >= 1"),
        ({"widths": (1,)}, "widths must be >= 2"),
    ],
)
def test_bad_adjudicate_input(kw: dict, fragment: str) -> None:
    with pytest.raises(TuneproofError) as e:
        AdjudicateSpec(**kw)
    assert fragment in e.value.message


def test_the_budget_stops_the_run_between_batches_and_says_what_it_left_out() -> None:
    """Issue 35: `adjudicate --widths 256,1024` ran past 600 s under load with no budget. A fake clock
    that every model call advances by 10 s: the first batch (truth and three backends) takes 40 s, so a
    100 s budget has room for two of width 64's three, and the rest is said, not silently dropped."""
    spec = AdjudicateSpec(widths=(64, 128), backends=("sdpa", "flex_attention", "eager"), samples=3,
                          budget_s=100.0)  # fmt: skip
    result, said = _ten_seconds_a_model(spec)
    assert {(r.width, r.sample) for r in result.results} == {(64, 0), (64, 1)}
    assert result.cut is not None and "width 64's batches 3 to 3, width 128 not run" in result.cut
    assert result.cut in result.notes and result.to_dict()["cut_by_budget"] == result.cut
    assert "one batch gives no spread" not in result.judge(64).reason  # judged on the two that ran
    assert said.lines[-1] == "width 64: batch 2 of 3: eager"  # each model said as it starts


def test_past_the_budget_the_first_batch_still_runs_and_progress_says_so() -> None:
    spec = AdjudicateSpec(widths=(64,), backends=("sdpa",), samples=2, budget_s=5.0, grads="off")
    result, said = _ten_seconds_a_model(spec)
    assert len(result.results) == 1 and "width 64's batches 2 to 2 not run" in str(result.cut)
    assert result.judge(64).outcome == "inconclusive"
    # said as it goes: the backend's line within the first batch, once past the budget
    assert (
        said.lines[-1]
        == "width 64: batch 1 of 2: sdpa (5 s past the 5 s budget; finishing the batch under way)"
    )


def _ten_seconds_a_model(spec: AdjudicateSpec) -> tuple[Any, RecordedProgress]:
    """`spec` run on the tiny model with a fake clock that every model call advances by 10 s."""
    now = [0.0]
    real = adjudicate._run

    def slow(model, ids, backward):  # type: ignore[no-untyped-def]
        now[0] += 10.0
        return real(model, ids, backward)

    said = RecordedProgress()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(adjudicate, "_run", slow)
        return run(prepare(replace(spec, model=resolve("tiny"))), said, clock=lambda: now[0]), said
