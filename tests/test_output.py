"""Output contracts: strict JSON (no NaN or Infinity, unknowns are null with a reason), tables that fit
an 80-column terminal, files that keep the user's umask, output folders checked before any work."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tuneproof.cli.app import main
from tuneproof.errors import TuneproofError
from tuneproof.io import atomic_write_json, check_out_folder, dumps

CASE = str(Path(__file__).parent.parent / "examples" / "gemma4-26b-a4b-like" / "config.json")
DATA = Path(__file__).parent / "data"


def strict_loads(text: str) -> object:
    def refuse(name: str) -> None:
        raise AssertionError(f"non-strict JSON literal {name}")

    return json.loads(text, parse_constant=refuse)


def test_dumps_writes_null_for_non_finite_numbers() -> None:
    text = dumps({"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}})
    assert strict_loads(text) == {"a": None, "b": [None, 1.5], "c": {"d": None}}


def test_unknowns_are_null_with_their_reason(tmp_path: Path, capsys) -> None:
    points = tmp_path / "p.csv"
    points.write_text("width,seconds\n1024,1\n2048,2.5\n4096,7\n")  # one row per width: no interval
    assert main(["fit", "--points", str(points), "--json"]) == 0
    d = strict_loads(capsys.readouterr().out)
    assert d["quad_share_ci"] is None and "needs 6" in d["ci_reason"]
    assert d["constant"]["interval"] is None and "add repeats" in d["constant"]["reason"]
    assert main(["flops", "--seq-len", "64", "--json"]) == 0
    mfu = strict_loads(capsys.readouterr().out)["mfu"]
    assert mfu["intended"] is None and mfu["reason"] == "no step time given"


COMMANDS = [
    ["flops", "--config", CASE, "--seq-len", "16384", "--batch", "2", "--mode", "lora", "--grad-ckpt"],
    ["explain", "--config", CASE, "--seq-len", "16384", "--batch", "2", "--padded", "--capability", "12.0"],
    ["kernels", "--trace", str(DATA / "case_sm120.json.gz")],
    pytest.param(["buckets", "--sweep", "1,16", "--config", "tiny"], marks=pytest.mark.slow),
]


@pytest.mark.parametrize("args", COMMANDS, ids=["flops", "explain", "kernels", "buckets"])
def test_tables_fit_80_columns(capsys, monkeypatch, args: list[str]) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.parametrize("args", COMMANDS, ids=["flops", "explain", "kernels", "buckets"])
def test_json_output_is_strict(capsys, args: list[str]) -> None:
    assert main([*args, "--json"]) == 0
    strict_loads(capsys.readouterr().out)


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_keep_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        path = atomic_write_json(tmp_path / "out" / "r.json", {"x": 1})
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == mode


def test_out_folder_checks(tmp_path: Path) -> None:
    check_out_folder(tmp_path / "new" / "deeper")  # creatable: fine, and nothing is created yet
    assert not (tmp_path / "new").exists()
    check_out_folder(tmp_path)
    assert list(tmp_path.iterdir()) == []  # the write check leaves nothing behind
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(TuneproofError, match="is a file"):
        check_out_folder(f)
    with pytest.raises(TuneproofError, match="is not a folder"):
        check_out_folder(f / "sub")
    with pytest.raises(TuneproofError, match="cannot be written"):
        check_out_folder(Path("/proc/tuneproof-out"))
    assert f.read_text() == "x"


def test_an_out_that_cannot_be_written_is_refused_before_the_probe_runs(capsys) -> None:
    import time

    t0 = time.perf_counter()
    assert main(["probe", "--out", "/proc/nope", "--widths", "64,128,256"]) == 2
    assert time.perf_counter() - t0 < 5  # refused up front, not after minutes of timing
    assert "cannot be written" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command,name",
    [
        (["probe", "--widths", "64,128,256"], "probe.json"),
        (["probe", "--widths", "64,128,256"], "trace.json.gz"),
        (["doctor"], "report.json"),
    ],
)
def test_an_output_name_taken_by_a_folder_is_refused_up_front(
    capsys, tmp_path: Path, command: list[str], name: str
) -> None:
    """Fresh eyes: with D/probe.json a folder, the probe ran for 33 s, then died with IsADirectoryError and
    left its other files behind."""
    (tmp_path / name).mkdir()
    assert main([*command, "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path / name} exists and is not a file (move it away or pass another output folder)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
