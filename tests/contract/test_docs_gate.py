"""docs/gate.md's examples are what the commands print: run them as written and compare."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from tuneproof.cli.app import main

ROOT = Path(__file__).parent.parent.parent
EXAMPLE = ROOT / "examples" / "gate"
pytestmark = pytest.mark.slow  # documentation checks: left out of mutation runs


def _readme() -> str:
    return (ROOT / "docs" / "gate.md").read_text()


def _block(after: str) -> str:
    readme = _readme()
    start = readme.index("```\n", readme.index(after)) + 4
    return readme[start : readme.index("```", start)]


def _arms(folder: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_arms", EXAMPLE / "make_arms.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, args in (("base", (1, 0.35, 0.40, 0.20)), ("tuned", (2, 0.05, 0.10, 0.05))):
        rows = module.arm(*args)
        (folder / f"{name}.jsonl").write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))


def _without_cache_line(text: str) -> str:
    # where the index lives and whether it was built or loaded depend on the machine and the run
    return re.sub(r"index (built|loaded)[^\n]*\n[^\n]*\.npy", "index <cache>", text)


def test_the_gate_example_prints_what_the_readme_shows(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(ROOT)
    _arms(tmp_path)
    argv = ["gate", "--base", str(tmp_path / "base.jsonl"), "--tuned", str(tmp_path / "tuned.jsonl"),
            "--attractors", "examples/gate/attractors.txt", "--corpus", "examples/gate/corpus.txt",
            "--probes", "examples/gate/probes.toml"]  # fmt: skip
    assert main(argv) == 0
    readme = _readme()
    start = readme.index("```\ntuned vs base on 60 shared prompts") + 4  # the output block
    shown = readme[start : readme.index("```", start)]
    assert _without_cache_line(capsys.readouterr().out) == _without_cache_line(shown)


def test_the_mining_example_prints_what_the_readme_shows(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    _arms(tmp_path)
    argv = ["attractors", "mine", "--outputs", str(tmp_path / "base.jsonl"), "--reference",
            "examples/gate/corpus.txt", "--top", "8"]  # fmt: skip
    assert main(argv) == 0
    shown = _block("## Mining a stock-phrase list").split("\n", 1)[1]  # the lines after the command
    assert capsys.readouterr().out == shown


def test_the_python_example_gives_the_numbers_in_its_comment(tmp_path: Path) -> None:
    from tuneproof.gate import PhraseMatcher, judge_arms, read_arm

    _arms(tmp_path)
    report = judge_arms(
        read_arm([tmp_path / "base.jsonl"], "base"),
        read_arm([tmp_path / "tuned.jsonl"], "tuned"),
        attractors=(PhraseMatcher(["a testament to", "delve into"]), "inline list"),
    )
    d = report.metrics["diversity"]
    shown = re.search(r"# (PASS [0-9. ]+)\n", (ROOT / "docs" / "conventions.md").read_text())
    assert shown is not None
    assert f"{report.verdict} {d.delta:.4f} {d.floor:.4f} {d.ratio:.2f}" == shown.group(1).strip()


def test_the_benchmark_example_prints_what_the_docs_show(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    spec = importlib.util.spec_from_file_location("make_lm_eval_docs", EXAMPLE / "make_lm_eval.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_lm_eval_docs"] = module
    spec.loader.exec_module(module)
    module.main(tmp_path)
    capsys.readouterr()
    argv = ["gate", *(x for i in (1, 2) for x in ("--base", str(tmp_path / f"base-{i}"))),
            *(x for i in (1, 2) for x in ("--tuned", str(tmp_path / f"tuned-{i}")))]  # fmt: skip
    assert main(argv) == 1
    readme = _readme()
    start = readme.index("```\nbenchmarks: tuned vs base on 930 documents") + 4
    assert capsys.readouterr().out == readme[start : readme.index("```", start)]
