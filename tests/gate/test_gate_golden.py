"""Golden outputs of `tuneproof gate`: every number, label, key and verdict it prints, pinned for three
fixed pairs of arms (the example's planted differences, an arm against itself with given floors, and
a tuned arm that copies the corpus). The bootstrap is seeded, so the output is exact.

Regenerate after a deliberate change with `TUNEPROOF_UPDATE_GOLDEN=1 .venv/bin/python -m pytest
tests/gate/test_gate_golden.py` and read the diff."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tuneproof.cli.app import main

ROOT = Path(__file__).parent.parent.parent
GOLDEN = Path(__file__).parent.parent / "data" / "golden"
EXAMPLE = ROOT / "examples" / "gate"


def _make_arms() -> object:
    spec = importlib.util.spec_from_file_location("make_arms", EXAMPLE / "make_arms.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(path: Path, rows: list[dict], compact: bool = False) -> str:
    """`compact`: another run's file of the same rows (other bytes: one file as both arms is refused)."""
    separators = (",", ":") if compact else None
    path.write_text("".join(json.dumps(r, separators=separators) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def arms(tmp_path: Path) -> dict[str, str]:
    make = _make_arms()
    base = make.arm(1, 0.35, 0.40, 0.20)  # type: ignore[attr-defined]
    tuned = make.arm(2, 0.05, 0.10, 0.05)  # type: ignore[attr-defined]
    words = (EXAMPLE / "corpus.txt").read_text().split()
    copied = [dict(r) for r in tuned]
    for i, r in enumerate(copied[::40]):  # 12 of 480 responses quote 45 corpus words
        r["text"] = "As the keeper wrote: " + " ".join(words[100 + i : 145 + i])
    one_run = [r for r in base if r["run"] == 0]
    files = {
        "base": _write(tmp_path / "base.jsonl", base),
        "tuned": _write(tmp_path / "tuned.jsonl", tuned),
        "copied": _write(tmp_path / "copied.jsonl", copied),
        "one_run": _write(tmp_path / "one_run.jsonl", one_run),
        "one_run_again": _write(tmp_path / "one_run_again.jsonl", one_run, compact=True),
        "no_change": str(tmp_path / "no_change.toml"),
        "gzip_spec": str(tmp_path / "spec.toml"),
    }
    Path(files["no_change"]).write_text(
        (EXAMPLE / "probes.toml").read_text()
        + '\n[[probe]]\nname = "stock-phrases"\nhypothesis = "no change"\nexpect = "no-change"\n'
        'prompts = ["q00", "q01", "q02", "q03", "q04", "q05", "q06", "q07"]\nregex = ["(?i)testament"]\n'
    )
    Path(files["gzip_spec"]).write_text('floor_k = 3\n[diversity]\nmetric = "gzip"\n[memorisation]\nk = 24\n')
    return files


CASES = {
    "gate_example": (
        ["--base", "@base", "--tuned", "@tuned", "--attractors", str(EXAMPLE / "attractors.txt"),
         "--corpus", str(EXAMPLE / "corpus.txt"), "--probes", str(EXAMPLE / "probes.toml")],
        0,
    ),
    "gate_same_arm_given_floors": (
        ["--base", "@one_run", "--tuned", "@one_run_again", "--attractors", str(EXAMPLE / "attractors.txt"),
         "--probes", "@no_change", "--floor", "diversity=0.01", "--floor", "attractors=2",
         "--floor", "diversity.gzip=0.05", "--floor", "probe:refusal-rate=3",
         "--floor", "probe:stock-phrases=5"],
        3,
    ),
    "gate_memorised_gzip_spec": (
        ["--base", "@base", "--tuned", "@copied", "--corpus", str(EXAMPLE / "corpus.txt"),
         "--spec", "@gzip_spec"],
        1,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_gate_golden(capsys, monkeypatch, tmp_path: Path, arms: dict[str, str], name: str, fmt: str) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    # the cache folder's path is printed and wrapped: a name of fixed length (pytest's tmp_path grows
    # with its run counter, pytest-9 -> pytest-10) keeps the wrapping, and so the golden text, stable
    cache = Path(tempfile.mkdtemp(prefix="tuneproof-golden-"))
    monkeypatch.setenv("TUNEPROOF_CACHE", str(cache))
    args, code = CASES[name]
    argv = ["gate", *[arms.get(a[1:], a) if a.startswith("@") else a for a in args]]
    assert main(argv + (["--json"] if fmt == "json" else [])) == code
    got = capsys.readouterr().out
    shutil.rmtree(cache)
    got = got.replace(str(cache), "<cache>").replace(str(tmp_path), "<tmp>").replace(str(ROOT), "<repo>")
    if fmt == "json":
        got = json.dumps(json.loads(got), indent=1, sort_keys=True) + "\n"
    path = GOLDEN / f"{name}.{'json' if fmt == 'json' else 'txt'}"
    if os.environ.get("TUNEPROOF_UPDATE_GOLDEN") == "1":
        path.write_text(got)
    assert got == path.read_text(), f"{path.name} changed: regenerate it if the change is deliberate"
