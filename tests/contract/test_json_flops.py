"""The library and the command tell one story: for flops, explain, adjudicate and doctor, the library
result's `to_dict()` is exactly what the command prints with --json (compared after the same strict
JSON encoding: tuples become lists, a non-finite number null)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from tuneproof.arch import resolve
from tuneproof.cli.app import main
from tuneproof.core.io import dumps


def _printed(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _as_json(result: Any) -> Any:
    return json.loads(dumps(result.to_dict()))


def _untimed(data: Any) -> Any:
    """`data` without the wall-clock timings ("plan_seconds"), which differ between runs."""
    if isinstance(data, dict):
        return {k: _untimed(v) for k, v in data.items() if k != "plan_seconds"}
    if isinstance(data, list):
        return [_untimed(v) for v in data]
    return data


def test_flops_json_is_the_library_report(capsys: pytest.CaptureFixture[str]) -> None:
    from tuneproof.commands.flops import FlopsSpec, prepare, run
    from tuneproof.flops import Step

    argv = ["--batch", "2", "--attn", "eager", "--padding-fraction", "0.25", "--mode", "lora"]
    argv += ["--lora-rank", "8", "--grad-ckpt", "--step-time", "0.5", "--gpu", "H100"]
    printed = _printed(capsys, ["flops", "--seq-len", "5000", *argv, "--json"])
    step = Step(
        seq_len=5000, batch=2, attn="eager", padding_fraction=0.25, mode="lora", lora_rank=8, grad_ckpt=True
    )
    result = run(prepare(FlopsSpec(model=resolve("tiny"), run=step, step_time_s=0.5, gpu="H100")))
    assert _as_json(result) == printed
    # 5000 tokens are past the tiny model's 4096 positions: counted as asked, with the note
    assert any("exceeds the model's max_position_embeddings 4096" in n for n in printed["notes"])


def test_explain_json_is_the_library_explanation(capsys: pytest.CaptureFixture[str]) -> None:
    from contexts import context
    from tuneproof.commands.explain import ExplainSpec, prepare, run

    printed = _printed(
        capsys, ["explain", "--seq-len", "512", "--batch", "2", "--padded", "--training", "--json"]
    )
    ctx = context(seq_len=512, batch=2, padded=True, training=True)
    assert _as_json(run(prepare(ExplainSpec(model=resolve("tiny"), context=ctx)))) == printed
    printed = _printed(capsys, ["explain", "--seq-len", "1024", "--capability", "12.0", "--json"])
    ctx = context(seq_len=1024, batch=1, capability=(12, 0))
    assert _as_json(run(prepare(ExplainSpec(model=resolve("tiny"), context=ctx)))) == printed


@pytest.mark.slow
def test_adjudicate_json_is_the_library_adjudication(capsys: pytest.CaptureFixture[str]) -> None:
    """Small: two widths of 32 and 48 tokens, two batches each, the two paths that need no compiling."""
    from tuneproof.commands.adjudicate import AdjudicateSpec, prepare, run

    argv = ["--widths", "32,48", "--backends", "sdpa,eager", "--samples", "2", "--seed", "3"]
    printed = _printed(capsys, ["adjudicate", *argv, "--json"])
    spec = AdjudicateSpec(widths=(32, 48), backends=("sdpa", "eager"), samples=2, seed=3)
    assert _as_json(run(prepare(replace(spec, model=resolve("tiny"))))) == printed


@pytest.mark.slow
def test_doctor_json_is_the_report_it_built(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's timings differ between two runs, so this compares the to_dict() of the very result
    the command printed (caught on its way out of `tuneproof.commands.doctor.run`), and the deterministic
    sections (FLOPs, dispatch, batching but its planning times) against the library's own section
    functions."""
    import tuneproof.commands.doctor as doctor

    built = []
    real_run = doctor.run

    def keep(plan: Any, progress: Any = None, notice: Any = None) -> Any:
        built.append(real_run(plan, progress, notice))
        return built[-1]

    monkeypatch.setattr(doctor, "run", keep)
    printed = _printed(capsys, ["doctor", "--probe-budget", "1", "--json"])
    (result,) = built
    assert _as_json(result) == printed
    shape = resolve("tiny").shape
    sections = printed["sections"]
    assert _as_json(doctor.flops_section(shape)) == sections["flops"]
    assert _as_json(doctor.explain_section(shape)) == sections["attention dispatch"]
    assert _untimed(_as_json(doctor.buckets_section(shape))) == _untimed(sections["batching"])
