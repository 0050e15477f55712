"""Installed as users install it: the wheel, in a fresh virtual environment, with and without extras.

The slow test builds the wheel from a copy of the source (nothing is written into the checkout),
installs it into a new venv with torch pinned to the version this suite runs on (the CPU build the
Makefile installs, from /opt/wheels where this machine has it), and runs the commands a new user runs
first from a folder outside the repository: the shipped data files must be inside the wheel, and
`train` must name its extra until `[train]` is installed.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tuneproof.core.extras import EXTRAS

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGE = ROOT / "src" / "tuneproof"
WHEELS = Path("/opt/wheels")  # this machine's local torch wheel, as the Makefile's FIND_LINKS


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_data_file_of_the_package_is_declared_as_package_data() -> None:
    globs = _pyproject()["tool"]["setuptools"]["package-data"]["tuneproof"]
    data = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*") if p.is_file()]
    data = [p for p in data if not p.endswith((".py", ".pyc")) and "__pycache__" not in p]
    assert "data/longtail_20k.jsonl.gz" in data
    undeclared = [p for p in data if not any(fnmatch.fnmatch(p, g) for g in globs)]
    assert undeclared == []


def test_the_extras_table_matches_pyproject() -> None:
    """tuneproof/core/extras.py names the import modules of each extra that pyproject.toml installs."""
    declared = _pyproject()["project"]["optional-dependencies"]
    dist_to_module = {"compressed-tensors": "compressed_tensors", "pyyaml": "yaml",
                      "sentence-transformers": "sentence_transformers"}  # fmt: skip
    for extra, modules in EXTRAS.items():
        names = [r.split(">")[0].split("=")[0].split("[")[0].strip().lower() for r in declared[extra]]
        assert sorted(dist_to_module.get(n, n.replace("-", "_")) for n in names) == sorted(modules)
    assert declared["all"] == ["tuneproof[train,quant,embed]"]
    assert set(EXTRAS) == {"train", "quant", "embed", "sentence", "axolotl"}


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    tail = f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"exit {proc.returncode}\n{tail}"
    return proc


@pytest.mark.slow
def test_the_wheel_installs_and_runs_in_a_fresh_venv(tmp_path: Path) -> None:
    import torch

    src = tmp_path / "src-copy"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(PACKAGE, src / "src" / "tuneproof", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    dist = tmp_path / "dist"
    _ok(_run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
              "-w", str(dist), str(src)], tmp_path, env))  # fmt: skip
    (wheel,) = dist.glob("tuneproof-*.whl")

    venv = tmp_path / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    _ok(_run([base_python, "-m", "venv", str(venv)], tmp_path, env))
    py, tp = str(venv / "bin" / "python"), str(venv / "bin" / "tuneproof")
    links = ["--find-links", str(WHEELS)] if WHEELS.is_dir() else []
    pin = f"torch=={torch.__version__.split('+')[0]}"  # the build this suite runs on: never a CUDA pull
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *links]
    _ok(_run([*pip, pin], tmp_path, env, timeout=900))
    _ok(_run([*pip, str(wheel)], tmp_path, env, timeout=900))

    work = tmp_path / "user"  # outside the repository: nothing can come from the source tree
    work.mkdir()
    assert tuneproof_version(_ok(_run([tp, "--version"], work, env)).stdout)
    doctor = _ok(_run([tp, "doctor", "--probe-budget", "3"], work, env))
    assert "projection" in doctor.stdout.lower() or "wall" in doctor.stdout.lower(), doctor.stdout[-2000:]
    _ok(_run([tp, "buckets"], work, env))
    _ok(_run([tp, "plan", "--fit", "6.87e-4,8.85e-8"], work, env))
    where = _ok(_run([py, "-c", "import tuneproof; print(tuneproof.__file__)"], work, env)).stdout
    assert str(venv) in where  # the installed copy, not the checkout

    no_extra = _run([tp, "train", "--output", str(work / "run")], work, env)
    assert no_extra.returncode == 2, no_extra.stderr
    assert "pip install 'tuneproof[train]'" in no_extra.stderr
    assert "Traceback" not in no_extra.stderr and len(no_extra.stderr.strip().splitlines()) == 1
    assert not (work / "run").exists()  # refused before any work

    _ok(_run([*pip, f"{wheel}[train]"], tmp_path, env, timeout=900))
    recipe = work / "short.toml"  # the embedded model and data, 4 steps, no probe: CI's 20 minutes
    recipe.write_text("[optim]\nmax_steps = 4\n[run]\nprobe_budget_s = 0\n")
    trained = _run(
        [tp, "train", str(recipe), "--output", str(work / "run"), "--json"], work, env, timeout=900
    )
    trained = _ok(trained)
    import json

    summary = json.loads(trained.stdout)
    assert summary["steps"] > 0 and summary["health"]
    assert (work / "run" / "report" / "report.md").is_file()


def tuneproof_version(text: str) -> str:
    """The version `tuneproof --version` prints (click's `tuneproof, version X`)."""
    return text.strip().rsplit(" ", 1)[-1] if text.startswith("tuneproof, version ") else ""
