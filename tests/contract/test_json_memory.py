"""The library and the command tell one story: `tuneproof memory --json` prints exactly the library
report's `to_dict()` (after the same strict JSON encoding)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tuneproof.arch import resolve
from tuneproof.cli.app import main
from tuneproof.core.io import dumps


def test_memory_json_is_the_library_report(capsys: pytest.CaptureFixture[str]) -> None:
    from tuneproof.commands.memory import MemorySpec, prepare, run
    from tuneproof.runs.step import Precision, Step, Training

    argv = ["--batch", "2", "--attn", "eager", "--padding-fraction", "0.25", "--mode", "lora"]
    argv += ["--lora-rank", "8", "--grad-ckpt", "--dtype", "fp32", "--grad-accum", "4"]
    argv += ["--optimizer-impl", "foreach", "--parallel", "ddp", "--world-size", "2", "--gpu", "L4"]
    assert main(["memory", "--seq-len", "2048", *argv, "--json"]) == 0
    printed: Any = json.loads(capsys.readouterr().out)
    step = Step(
        seq_len=2048, batch=2, attn="eager", padding_fraction=0.25, mode="lora", lora_rank=8, grad_ckpt=True,
        precision=Precision(dtype="fp32"),
        training=Training(optimizer_impl="foreach", grad_accum=4, parallel="ddp", world_size=2),
    )  # fmt: skip
    spec = MemorySpec(model=resolve("tiny"), run=step, gpu="L4")
    assert json.loads(dumps(run(prepare(spec)).to_dict())) == printed
    assert printed["fit"]["gpu"] == "L4" and printed["components"]["sharding"] > 0
