"""The library and the command tell one story: for gate, attractors mine and generate, the library
result's `to_dict()` is exactly what the command prints with --json (compared after the same strict
JSON encoding: tuples become lists, a non-finite number null)."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tuneproof.cli.app import main
from tuneproof.core.io import dumps

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "gate"


def _printed(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> Any:
    assert main(argv) == code
    return json.loads(capsys.readouterr().out)


def _as_json(result: Any) -> Any:
    return json.loads(dumps(result.to_dict()))


@pytest.fixture
def arms(tmp_path: Path) -> tuple[Path, Path]:
    """The documented example's arms (examples/gate/make_arms.py): planted differences, 2 runs each."""
    spec = importlib.util.spec_from_file_location("make_arms", EXAMPLE / "make_arms.py")
    assert spec and spec.loader
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    paths = []
    for name, args in (("base", (1, 0.35, 0.40, 0.20)), ("tuned", (2, 0.05, 0.10, 0.05))):
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_text("".join(json.dumps(r) + "\n" for r in make.arm(*args)))  # type: ignore[attr-defined]
    return paths[0], paths[1]


def test_gate_json_is_the_library_report(
    capsys, monkeypatch, tmp_path: Path, arms: tuple[Path, Path]
) -> None:
    from tuneproof.commands.gate import GateCommandSpec, prepare, run

    monkeypatch.setenv("TUNEPROOF_CACHE", str(tmp_path / "cache"))
    base, tuned = arms
    request = GateCommandSpec(
        base=(base,), tuned=(tuned,), attractors=EXAMPLE / "attractors.txt", corpus=(EXAMPLE / "corpus.txt",),
        probes=EXAMPLE / "probes.toml", floor_k=2.5, out=tmp_path / "report.json",
    )  # fmt: skip
    run(prepare(request))  # builds the corpus index: both calls below load it ("loaded from ...")
    result = run(prepare(request))
    argv = ["gate", "--base", str(base), "--tuned", str(tuned), "--attractors", str(request.attractors),
            "--corpus", str(request.corpus[0]), "--probes", str(request.probes),
            "--floor-k", "2.5", "--json"]  # fmt: skip
    printed = _printed(capsys, argv, code=result.verdict.exit_code)
    assert _as_json(result) == printed and json.loads((tmp_path / "report.json").read_text()) == printed
    assert printed["verdict"] == result.verdict.outcome == "PASS" and result.verdict.exit_code == 0
    assert "index" in printed["metrics"]["memorisation"] and printed["inputs"]["floor_k"] == 2.5
    # another run of the base (other bytes, the same rows) with given floors: INCONCLUSIVE, exit 3
    again = base.with_name("base-again.jsonl")
    again.write_text(
        "".join(
            json.dumps(json.loads(x), separators=(",", ":")) + "\n" for x in base.read_text().splitlines()
        )
    )
    floors = ("diversity=0.01", "attractors=2", "probe:refusal-rate=3")
    same = GateCommandSpec(base=(base,), tuned=(again,), attractors=request.attractors, probes=request.probes,
                       floors=floors)  # fmt: skip
    result = run(prepare(same))
    argv = ["gate", "--base", str(base), "--tuned", str(again), "--attractors", str(request.attractors),
            "--probes", str(request.probes), *(x for f in floors for x in ("--floor", f)),
            "--json"]  # fmt: skip
    assert _as_json(result) == _printed(capsys, argv, code=3)
    assert result.verdict.outcome == "INCONCLUSIVE" and result.verdict.exit_code == 3


def test_attractors_mine_json_is_the_library_result(capsys, tmp_path: Path, arms: tuple[Path, Path]) -> None:
    from tuneproof.commands.attractors import MiningSpec, prepare, run

    base, _ = arms
    out = tmp_path / "phrases.txt"
    result = run(prepare(MiningSpec(outputs=(base,), reference=EXAMPLE / "corpus.txt", top=8, out=out)))
    listed = out.read_text()
    argv = ["attractors", "mine", "--outputs", str(base), "--reference", str(EXAMPLE / "corpus.txt"),
            "--top", "8", "--out", str(out), "--json"]  # fmt: skip
    printed = _printed(capsys, argv)
    assert _as_json(result) == printed and len(printed["phrases"]) == 8 and out.read_text() == listed
    assert result.verdict is None and printed["out"] == str(out)


def test_generate_json_is_the_library_sidecar(capsys, tmp_path: Path) -> None:
    from tuneproof.commands.generate import GenerateSpec, prepare, run

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt_id": "a", "prompt": "hi"}\n{"prompt_id": "b", "prompt": "yo"}\n')
    spec = GenerateSpec(model="tiny", prompts=str(prompts), runs=2, samples=2, max_new_tokens=3, seed=7)
    result = run(prepare(replace(spec, out=tmp_path / "library.jsonl")))
    argv = ["generate", "--model", "tiny", "--prompts", str(prompts), "--runs", "2", "--samples", "2",
            "--max-new-tokens", "3", "--seed", "7", "--out", str(tmp_path / "command.jsonl"),
            "--json"]  # fmt: skip
    printed = _printed(capsys, argv)
    assert _as_json(result) == printed and printed["generation"]["seeds"] == [7, 8]
    assert (tmp_path / "library.jsonl").read_text() == (tmp_path / "command.jsonl").read_text()
    assert json.loads((tmp_path / "command.meta.json").read_text()) == printed and result.verdict is None
