"""`tuneproof train --json` prints exactly the library's `TrainResult.to_dict()`; the text summary is
`TrainResult.render`; the run applies its LoRA once to real weights (the targets are checked on the
meta device first); the base's fingerprint is written into the adapter folder by train itself.

The JSON is checked on one short run of the tiny default: the command's own call of the library's
`run` is captured (a spy that returns what the library returned), and the JSON the command printed
is compared with that result's `to_dict()` through the same strict encoder."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from tuneproof.cli.app import main
from tuneproof.train.result import TrainResult


@pytest.mark.slow  # a real Trainer run
def test_train_json_is_the_library_results_to_dict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tuneproof.commands.train as t
    import tuneproof.train.base as base
    from tuneproof.core.io import dumps

    results: list[TrainResult] = []
    real_run = t.run

    def spy(*args: Any, **kwargs: Any) -> TrainResult:
        results.append(real_run(*args, **kwargs))
        return results[-1]

    devices: list[str] = []
    real_attach = base.attach_lora

    def attach(model: Any, recipe: Any) -> Any:
        devices.append(next(model.parameters()).device.type)
        return real_attach(model, recipe)

    monkeypatch.setattr(t, "run", spy)
    monkeypatch.setattr(t, "attach_lora", attach)
    monkeypatch.setattr(base, "attach_lora", attach)
    recipe = tmp_path / "r.toml"
    recipe.write_text("[optim]\nmax_steps = 2\ngrad_accum = 1\n[run]\nprobe_budget_s = 0\n")
    out = tmp_path / "run"
    assert main(["train", str(recipe), "--output", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    (result,) = results
    assert printed == json.loads(dumps(result.to_dict()))
    assert printed["steps"] == 2 and printed["attention"] == "sdpa"
    assert printed["adapter"] == str(out / "adapter") and printed["output_dir"] == str(out)
    assert printed["base_fingerprint"] == str(out / "adapter" / "base_fingerprint.json")
    for key in ("base_fingerprint", "adapter_health", "report"):
        assert Path(printed[key]).is_file(), key
    assert not (out / "checkpoints" / "base_fingerprint.json").exists()  # train writes it, nothing moves it
    assert devices == ["meta", "cpu"]  # checked on the meta device, applied once to the weights


def _result(**kwargs: Any) -> TrainResult:
    folder = Path("/tmp/a-run-folder-whose-path-is-long-enough-to-pass-eighty-columns/run")
    fields: dict[str, Any] = dict(
        output_dir=folder, adapter_dir=folder / "adapter", steps=40, loss=6.03181, attention="sdpa",
        health="lora_B non-zero in 59 of 59 adapted modules, median norm 0.05686",
        fingerprint=folder / "adapter" / "base_fingerprint.json",
    )  # fmt: skip
    return TrainResult(**{**fields, **kwargs})


def _rendered(result: TrainResult) -> list[str]:
    from rich.console import Console

    buffer = io.StringIO()
    result.render(Console(file=buffer, width=80, highlight=False))
    return buffer.getvalue().splitlines()


def test_the_summary_is_printed_as_it_is_never_wrapped() -> None:
    result = _result()
    lines = _rendered(result)
    assert lines == result.lines()
    assert [line.split()[0] for line in lines] == ["trained", "adapter", "health", "report", "base", "recipe"]
    assert lines[0] == "trained   40 optimizer steps, mean loss 6.0318, attention sdpa"
    assert lines[4].endswith("run/adapter/base_fingerprint.json") and max(map(len, lines)) > 80


def test_a_resumed_run_says_its_loss_is_this_sessions_and_unknowns_are_named() -> None:
    lines = _rendered(_result(resumed=True, health=None, fingerprint=None))
    session = "(the mean loss is over the steps of this session, as the Trainer reports it)"
    assert lines[1] == " " * 10 + session
    assert "health    unknown (not a PEFT model)" in lines
    assert "base      fingerprint not recorded: the base is not a local safetensors folder" in lines
    data = _result(health=None, fingerprint=None).to_dict()
    assert data["base_fingerprint"] is None and data["adapter_health"] is None and data["report"] is None
    assert _result().verdict is None and _result().warnings == []


def test_progress_bars_are_turned_off_for_the_run_only() -> None:
    """Both switches are process-wide: the run leaves them as it found them, on or off (another test
    module, tests/ship_fakes.py, turns transformers' off at import)."""
    import datasets
    from transformers.utils import logging as hf_logging

    from tuneproof.train.trainer import progress_bars_off

    before = (hf_logging.is_progress_bar_enabled(), datasets.are_progress_bars_disabled())
    try:
        hf_logging.enable_progress_bar()
        datasets.enable_progress_bars()
        with progress_bars_off(True):
            assert not hf_logging.is_progress_bar_enabled() and datasets.are_progress_bars_disabled()
        assert hf_logging.is_progress_bar_enabled() and not datasets.are_progress_bars_disabled()
        hf_logging.disable_progress_bar()
        with progress_bars_off(True):
            pass
        assert not hf_logging.is_progress_bar_enabled()  # off before: left off
    finally:
        (hf_logging.enable_progress_bar if before[0] else hf_logging.disable_progress_bar)()
        (datasets.disable_progress_bars if before[1] else datasets.enable_progress_bars)()
