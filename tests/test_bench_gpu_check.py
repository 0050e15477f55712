"""bench/gpu_check.py, the device check for a lent GPU: its dry run lists every step with its budget
on any machine, without CUDA; without a CUDA device the real run refuses in one line (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu_check.py"
STEPS = ("build", "dispatch", "flex_options", "probe", "flex_vs_sdpa", "train")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )


def test_the_dry_run_lists_every_step_its_budget_and_the_deadline() -> None:
    out = _run("--dry-run")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    rows = [words for words in map(str.split, lines) if words and words[0] in STEPS]
    assert [words[0] for words in rows] == list(STEPS)
    budgets = {words[0]: int(words[1]) for words in rows}
    total = next(int(line.split()[1]) for line in lines if line.startswith("total"))
    deadline = int(lines[0].split("deadline ")[1].split()[0])
    assert sum(budgets.values()) == total <= deadline < 540  # under 9 minutes in all
    assert "bench/results/gpu-<device-name-slug>.txt" in out.stdout


def test_the_dry_run_never_touches_cuda() -> None:
    """The dry run imports neither torch nor the steps (so it cannot call CUDA)."""
    code = (
        f"import sys, runpy; sys.argv = [{str(SCRIPT)!r}, '--dry-run']\n"
        "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules, 'gpu_check_steps' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.stdout.splitlines()[-1] == "False False", out.stdout + out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_the_check_refuses_in_one_line() -> None:
    out = _run()
    assert out.returncode == 2
    assert out.stdout == "" and out.stderr.startswith("error: ") and len(out.stderr.splitlines()) == 1


def test_the_device_name_becomes_a_file_name() -> None:
    slug = _module().slug
    assert slug("NVIDIA H200") == "nvidia-h200"
    assert slug("NVIDIA RTX PRO 6000 Blackwell Workstation Edition") == (
        "nvidia-rtx-pro-6000-blackwell-workstation-edition"
    )


def _module():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return gpu_check


@pytest.mark.skipif(torch.cuda.is_available(), reason="the child refuses only without CUDA")
def test_a_failing_or_stopped_step_is_a_row_not_a_crash(tmp_path: Path) -> None:
    """The harness's two ways a step goes wrong, each one row of the table: the child's exit (here its
    refusal without CUDA) with its last line, and the step's time limit."""
    g = _module()
    step = g.Step("dispatch", 30, "what it does")
    failed = g.run_step(step, tmp_path, 60)
    assert failed["outcome"] == "fail" and "exit 2: error: no CUDA device" in str(failed["numbers"])
    assert (tmp_path / "dispatch.log").exists()
    stopped = g.run_step(step, tmp_path, 0.01)
    assert stopped["outcome"] == "timeout" and "limit of 0 s" in str(stopped["numbers"])
    text = g.table("a device", {"dispatch": failed}, {"train": "600 s spent, past the 520 s deadline"}, 61.0)
    assert text.splitlines()[3].startswith("dispatch       fail")
    assert "train          skipped" in text and "past the 520 s deadline" in text
