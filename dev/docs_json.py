"""Every `tuneproof` example of README.md and docs/*.md, run with --json, one file of output each: the
record a restructuring compares before and after (`python dev/docs_json.py OUT`, then
`python dev/docs_json.py --diff OLD NEW`).

The example makers the pages run first (`python examples/.../make_*.py DIR`) are run too, into the
folders the pages name. Commands that time or train (probe, doctor, adjudicate, train) measure the
machine: their numbers differ between any two runs, so the diff compares only their keys. Values whose
key names a time (`seconds`, `*_s`, `plan_seconds`, ...) are left out of every comparison.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MEASURED = ("probe", "doctor", "adjudicate", "train")
TIMED = re.compile(r"(seconds|_s|_ms|time|wall|elapsed|imports|by_thread|bound)$")


def commands() -> tuple[list[str], list[list[str]]]:
    """(example makers, tuneproof commands) in the pages' code blocks, continuation lines joined."""
    makers: list[str] = []
    found: list[list[str]] = []
    for page in PAGES:
        for block in page.read_text().split("```")[1::2]:
            text = re.sub(r"\\\n\s*", " ", block)
            for raw in text.splitlines():
                line = raw.strip().removeprefix("$ ")
                if line.startswith("python examples/") and "make_" in line:
                    makers.append(line.split("#")[0].strip())
                elif line.startswith("tuneproof ") and not line.startswith("tuneproof --"):
                    argv = shlex.split(line.split("  #")[0])[1:]
                    if _runnable(argv) and argv not in found:
                        found.append(argv)
    return list(dict.fromkeys(makers)), found


def _runnable(argv: list[str]) -> bool:
    """A command as written, not a synopsis (`[--batch B]`, `--config PATH`, `a|b`) nor prose."""
    placeholder = re.compile(r"^[A-Z][A-Z_.]*[A-Z]?(\.yml|\.toml)?$|^[A-Z]$")
    return (
        bool(argv)
        and argv[0][0].isalpha()
        and not argv[0].endswith(",")
        and not any("[" in a or "|" in a or placeholder.match(a) for a in argv)
    )


def _name(argv: list[str]) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", " ".join(argv))[:150]


def record(out: Path, python: str) -> None:
    makers, found = commands()
    for line in makers:
        folder = Path(shlex.split(line)[-1])
        if folder.is_absolute() and str(folder).startswith("/tmp/"):
            shutil.rmtree(folder, ignore_errors=True)
        subprocess.run([python, *shlex.split(line)[1:]], cwd=ROOT, capture_output=True, check=False)
    out.mkdir(parents=True, exist_ok=True)
    for argv in found:
        json_argv = argv if "--json" in argv else [*argv, "--json"]
        for flag in ("--out", "--output"):  # merge and train write a folder: start from none
            target = argv[argv.index(flag) + 1] if flag in argv[:-1] else ""
            if argv[0] in ("merge", "train") and target.startswith("/tmp/"):
                shutil.rmtree(target, ignore_errors=True)
        run = subprocess.run(
            [python, "-m", "tuneproof", *json_argv], cwd=ROOT, capture_output=True, text=True, timeout=900
        )
        body: dict[str, Any] = {"argv": json_argv, "exit": run.returncode}
        try:
            body["json"] = json.loads(run.stdout)
        except ValueError:
            body["stdout"] = run.stdout
            body["stderr"] = run.stderr[-2000:]
        (out / f"{_name(argv)}.json").write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
        print(run.returncode, " ".join(json_argv), flush=True)


def _untimed(data: Any, keys_only: bool) -> Any:
    if isinstance(data, dict):
        return {k: _untimed(v, keys_only) for k, v in data.items() if not TIMED.search(str(k))}
    if isinstance(data, list):
        return [_untimed(v, keys_only) for v in data]
    return None if keys_only else data


def _leaves(x: Any, y: Any, where: str = "") -> list[str]:
    """Where `x` and `y` differ, leaf by leaf: `path: old -> new` (a list compared item by item)."""
    if isinstance(x, dict) and isinstance(y, dict):
        return [line for k in {**x, **y} for line in _leaves(x.get(k), y.get(k), f"{where}.{k}")]
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        return [
            line for i, (a, b) in enumerate(zip(x, y, strict=True)) for line in _leaves(a, b, f"{where}[{i}]")
        ]
    if x == y:
        return []
    return [f"{where or '.'}: {json.dumps(x)[:160]} -> {json.dumps(y)[:160]}"]


def diff(old: Path, new: Path) -> int:
    changed = 0
    for a in sorted(old.glob("*.json")):
        b = new / a.name
        if not b.exists():
            print(f"missing in {new}: {a.name}")
            changed += 1
            continue
        x, y = json.loads(a.read_text()), json.loads(b.read_text())
        keys_only = x["argv"][0] in MEASURED
        lines = _leaves(_untimed(x, keys_only), _untimed(y, keys_only))
        if lines:
            changed += 1
            print(f"differs: {a.name}")
            for line in lines[:20]:
                print(f"  {line}")
            if len(lines) > 20:
                print(f"  ... and {len(lines) - 20} more")
    print(f"{changed} of {len(list(old.glob('*.json')))} differ")
    return 1 if changed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--diff"]:
        sys.exit(diff(Path(sys.argv[2]), Path(sys.argv[3])))
    record(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else sys.executable)
