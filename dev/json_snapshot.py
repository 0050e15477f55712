"""Every example command of the README and docs/ run with --json, one file per command, for a diff
before and after a change that must not change behaviour (issue 30's restructuring, say).

    python dev/json_snapshot.py OUT_DIR            # run every example, write OUT_DIR/NN-<verb>.json
    python dev/json_snapshot.py --diff OLD NEW     # compare two snapshots, measured times masked

Paths under /tmp/ in the docs are mapped into one scratch folder, made afresh with the examples'
own generators (examples/gate/make_arms.py, make_lm_eval.py, examples/ship/make_models.py), so that
two snapshots read the same inputs. Run from the repository root with the venv's python; set
PYTHONPATH=<other checkout>/src to snapshot another tree with the same venv.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUP = [
    ["examples/gate/make_arms.py", "ex"],
    ["examples/gate/make_lm_eval.py", "ex-lm"],
    ["examples/ship/make_models.py", "ship-demo"],
]
# Keys whose values are measured on this machine (times, rates, what a timing implies): masked in --diff.
MEASURED = re.compile(
    r"(time|_s$|_s_|seconds|elapsed|tflops|per_s|rate|throughput|achieved|mfu|wall|duration|"
    r"overhead|budget|speed|timestamp|date|path|folder|dir$|file)",
    re.IGNORECASE,
)


def command_lines() -> list[str]:
    """Every runnable `tuneproof ...` line in a code block of the README or docs/, read as
    tests/contract/test_docs.py reads them; usage lines ([options], PLACEHOLDERS) and --version left out."""
    sys.path.insert(0, str(ROOT / "tests" / "contract"))
    from test_docs import PAGES, is_synopsis
    from test_docs import command_lines as page_lines

    lines = [line for page in PAGES for line in page_lines(page.read_text())]
    return list(dict.fromkeys(line for line in lines if not is_synopsis(line) and "--version" not in line))


def snapshot(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COLUMNS": "110", "TUNEPROOF_NO_PROGRESS": "1"}
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for script, folder in SETUP:
            subprocess.run([sys.executable, script, str(scratch / folder)], cwd=ROOT, env=env, check=True,
                           capture_output=True)  # fmt: skip
        # the docs write /tmp/ex/tiny.jsonl and /tmp/ship-demo/m: fresh names per command
        for n, line in enumerate(command_lines()):
            words = [w.replace("/tmp/", f"{scratch}/") for w in shlex.split(line)[1:]]
            if "--out" in words or "--output" in words:
                i = words.index("--out") if "--out" in words else words.index("--output")
                words[i + 1] = f"{words[i + 1]}-{n}"
            proc = subprocess.run([sys.executable, "-m", "tuneproof", *words, "--json"], cwd=ROOT, env=env,
                                  capture_output=True, text=True)  # fmt: skip
            stdout = proc.stdout.replace(str(scratch), "/SCRATCH")
            record = {"command": line, "exit": proc.returncode, "stderr": _stderr(proc.stderr, scratch)}
            try:
                record["json"] = json.loads(stdout)
            except json.JSONDecodeError:
                record["stdout"] = stdout
            name = f"{n:02d}-{'-'.join(w for w in words[:2] if not w.startswith('-'))[:40]}"
            (out / f"{name.replace('/', '_')}.json").write_text(json.dumps(record, indent=1, sort_keys=True))
            print(f"{name}: exit {proc.returncode}", flush=True)


def _stderr(text: str, scratch: Path) -> list[str]:
    return [line.replace(str(scratch), "/SCRATCH") for line in text.splitlines() if line.startswith("error")]


def _mask(value: object, key: str = "") -> object:
    if isinstance(value, dict):
        return {k: _mask(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, key) for v in value]
    if isinstance(value, float | int) and not isinstance(value, bool) and MEASURED.search(key):
        return "<measured>"
    return value


def diff(old: Path, new: Path) -> int:
    """Lines of the two snapshots that differ once measured values are masked; exit 1 if any."""
    import difflib

    changed = 0
    for a in sorted(old.glob("*.json")):
        b = new / a.name
        left = json.dumps(_mask(json.loads(a.read_text())), indent=1, sort_keys=True).splitlines()
        right = json.dumps(_mask(json.loads(b.read_text())), indent=1, sort_keys=True).splitlines() if (
            b.exists()) else []  # fmt: skip
        lines = list(difflib.unified_diff(left, right, str(a), str(b), lineterm="", n=1))
        if lines:
            changed += 1
            print("\n".join(lines))
    print(f"{changed} of {len(list(old.glob('*.json')))} commands differ (measured values masked)")
    return 1 if changed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--diff"] and len(sys.argv) == 4:
        sys.exit(diff(Path(sys.argv[2]), Path(sys.argv[3])))
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    snapshot(Path(sys.argv[1]))
