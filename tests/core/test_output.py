"""Output contracts: strict JSON (no NaN or Infinity, unknowns are null with a reason), tables that fit
an 80-column terminal, files that keep the user's umask, output folders checked before any work."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError
from tuneproof.core.io import atomic_write_json, check_out_folder, dumps

CASE = str(Path(__file__).parent.parent.parent / "examples" / "gemma4-26b-a4b-like" / "config.json")
DATA = Path(__file__).parent.parent / "data"


def strict_loads(text: str) -> object:
    def refuse(name: str) -> None:
        raise AssertionError(f"non-strict JSON literal {name}")

    return json.loads(text, parse_constant=refuse)


def test_dumps_writes_null_for_non_finite_numbers() -> None:
    text = dumps({"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}})
    assert strict_loads(text) == {"a": None, "b": [None, 1.5], "c": {"d": None}}


def test_unknowns_are_null_with_their_reason(tmp_path: Path, capsys) -> None:
    points = tmp_path / "p.csv"
    points.write_text("width,seconds\n1024,1\n2048,2.5\n4096,8\n")  # 3 rows, 3 coefficients: no interval
    assert main(["fit", "--points", str(points), "--json"]) == 0
    d = strict_loads(capsys.readouterr().out)
    assert d["quad_share_ci"] is None and "no residual is left" in d["ci_reason"]
    assert d["ci_method"] is None and d["constant"]["verdict"] == "undetermined"
    assert main(["flops", "--seq-len", "64", "--json"]) == 0
    mfu = strict_loads(capsys.readouterr().out)["mfu"]
    assert mfu["intended"] is None and mfu["reason"] == "no step time given"


COMMANDS = [
    ["flops", "--config", CASE, "--seq-len", "16384", "--batch", "2", "--mode", "lora", "--grad-ckpt"],
    ["explain", "--config", CASE, "--seq-len", "16384", "--batch", "2", "--padded", "--capability", "12.0"],
    ["kernels", "--trace", str(DATA / "case_sm120.json.gz")],
    pytest.param(["buckets", "--sweep", "1,16", "--config", "tiny"], marks=pytest.mark.slow),
]
NARROW = [
    *COMMANDS,
    pytest.param(["buckets", "--sweep", "1,16", "--config", CASE], marks=pytest.mark.slow),
    ["quant-audit", "--recipe", str(DATA / "quant_recipes" / "recipe_awq_nvfp4.yaml"), "--config", CASE],
    pytest.param(["adjudicate", "--widths", "64", "--samples", "2", "--backends", "eager,sdpa"],
                 marks=pytest.mark.slow),
]  # fmt: skip


@pytest.mark.parametrize(
    "args",
    NARROW,
    ids=["flops", "explain", "kernels", "buckets", "buckets-case", "quant-audit", "adjudicate"],
)
def test_tables_fit_80_columns_and_keep_every_digit(capsys, monkeypatch, args: list[str]) -> None:
    """At 80 columns rich cut `5.636e+16` to `5.636e…` and `zero-pad` to `zero-p…`: cells now wrap or
    fold, never crop."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main(args) in (0, 1)  # quant-audit's finding exits 1
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out


def test_the_doctor_tables_keep_every_digit_at_80_columns() -> None:
    from rich.console import Console

    from tuneproof.arch import resolve
    from tuneproof.commands.doctor import buckets_section, flops_section

    shape = resolve(CASE).shape
    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    flops_section(shape).render(console)
    buckets_section(shape).render(console)
    text = console.export_text()
    assert "…" not in text and "zero-pad" in text.replace("\n", "")
    assert max(len(line) for line in text.splitlines()) <= 80


def test_report_lines_wrap_under_their_text() -> None:
    from tuneproof.cli.common import wrap_lines

    line = "what      " + " ".join(["word"] * 30)
    wrapped = wrap_lines([line, "short", "/a/path/" + "x" * 90], 40)
    assert all(len(w) <= 40 for w in wrapped[:-1]) and wrapped[-1].startswith("/a/path/")
    assert wrapped[0].startswith("what      word") and wrapped[1].startswith(" " * 10 + "word")
    assert " ".join(wrapped[:-2]).split() == line.split()
    assert "short" in wrapped


def test_progress_off_a_terminal_is_a_line_on_stderr_for_long_work_only(capsys) -> None:
    """Off a terminal, `doctor` on a 1B config printed nothing for 6 min 40 s. Now long work prints a
    line after 5 s and then at most every 10 s; quick work (and a one-line error) prints none."""
    from tuneproof.cli.common import Lines

    now = [100.0]
    lines = Lines()
    lines.clock = lambda: now[0]
    lines.start = 100.0
    lines("loading")  # quick so far: nothing
    now[0] = 106.0
    lines("round 1")
    now[0] = 110.0
    lines("round 2")  # inside 10 s of the last line
    now[0] = 117.0
    lines("round 3")
    lines("round 3")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == ["progress: round 1 (6 s)", "progress: round 3 (17 s)"]


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


def test_quant_audit_rows_keep_their_columns_at_80(capsys, monkeypatch) -> None:
    """Its family rows were wider than 80 columns and wrapped into a staircase of 'unknown' sizes."""
    monkeypatch.setenv("COLUMNS", "80")
    recipe = str(DATA / "quant_recipes" / "recipe_awq_nvfp4.yaml")
    main(["quant-audit", "--recipe", recipe, "--config", CASE])
    rows = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.strip().startswith(("experts", "router"))
    ]
    assert rows and all(line.rstrip().endswith(("unknown", "GiB")) for line in rows)
