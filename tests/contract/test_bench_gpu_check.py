"""bench/gpu_check.py, the device check for a lent GPU: its dry run lists every step with its budget
on any machine, without CUDA; without a CUDA device the real run refuses in one line (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "bench" / "gpu_check.py"
STEPS = ("build", "dispatch", "sdpa_grid", "flex_options", "probe", "flex_vs_sdpa", "train", "memory")


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


def _module(name: str = "gpu_check"):  # type: ignore[no-untyped-def]
    """bench/gpu_check.py (or its steps, "gpu_check_steps") imported as a module."""
    import importlib

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(SCRIPT.parent))


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


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="a rehearsal for machines without CUDA")
def test_every_step_runs_end_to_end_in_a_cpu_rehearsal(tmp_path: Path, monkeypatch) -> None:
    """The device check gets one short run on a lent GPU: every step's own code (the library calls,
    the result fields it reads, its table row) is run here first, on the CPU at a small scale, with
    the card's facts given as an H200's and the flex compile answered as Triton answers on one."""
    from tuneproof.attention import kernel_measure

    s = _module("gpu_check_steps")
    full = s.model_config()

    def small() -> dict[str, object]:
        return {**full, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
                "num_key_value_heads": 1, "num_global_key_value_heads": 1, "head_dim": 32,
                "global_head_dim": 64, "vocab_size": 1024, "sliding_window": 64}  # fmt: skip

    def triton(head_dim: int, dtype: str, pass_: str, options: dict[str, int]) -> None:
        if not options and head_dim == 512 and pass_ == "fwd":  # torch's 64x32 x 3 stages at d=512
            raise RuntimeError("out of resource: shared memory, Required: 262144, Hardware limit: 232448.")

    for name, value in {
        "DEVICE": "cpu", "WIDTHS": (128, 256), "PROBE_WIDTHS": (64, 128, 256), "FLEX_T": 128,
        "TRAIN_STEPS": 2, "TRAIN_ROW_WORDS": 150, "MEMORY_T": 256, "TRAIN_ATTENTION": "sdpa",
        "model_config": small,
        "_cuda_facts": lambda: ((9, 0), 232_448),
    }.items():  # fmt: skip
        monkeypatch.setattr(s, name, value)
    monkeypatch.setattr(kernel_measure, "compile_flex", triton)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: 0)
    rows: dict[str, list[dict[str, object]]] = {}
    for step in STEPS:
        if step == "flex_options":  # one real forward compile; the other cases answered by the fake
            real = s._flex_case
            # the tensors require grad (a training forward), which flex refuses on a CPU: a result row
            assert real(64, True, {}, False).startswith("fwd failed: NotImplementedError: FlexAttention")
            monkeypatch.setattr(
                s, "_flex_case", lambda d, sliding, opts, bwd, retry=True: "fwd+bwd ran" if bwd else "fwd ran"
            )
        budget = 20.0 if step == "probe" else 60.0
        getattr(s, f"step_{step}")(tmp_path, budget, lambda row, n=step: rows.setdefault(n, []).append(row))
        assert rows[step], step
    last = {k: v[-1] for k, v in rows.items()}
    assert last["build"]["outcome"] == "ok" and "sm_90, 232,448 B smem/block" in str(last["build"]["numbers"])
    # the CPU cannot answer live for a 9.0 card: every layer says so, and the step still reports
    assert last["dispatch"]["outcome"] == "DIFF" and "not asked live" in str(last["dispatch"]["numbers"])
    # on the CPU the grid asks torch._fused_sdp_choice itself: the prediction must agree everywhere
    assert last["sdpa_grid"]["outcome"] == "ok" and "504 cases (cpu), 0 differ" in str(
        last["sdpa_grid"]["numbers"]
    )
    flex = str(last["flex_options"]["numbers"])
    assert "no 1-stage retry d=512: fwd ran; estimate 64x32 x 3: 262,144 B vs 232,448 B" in flex, flex
    assert last["flex_options"]["outcome"] == "ok" and "'fwd_num_stages': 2" in flex, flex
    assert last["probe"]["outcome"] in ("ok", "disagree", "inconclusive") and "A=" in str(
        last["probe"]["numbers"]
    )
    assert last["flex_vs_sdpa"]["outcome"] == "fail"  # flex training fails on the CPU, as at every width
    assert str(last["flex_vs_sdpa"]["numbers"]).count("flex failed") == 2
    memory = str(last["memory"]["numbers"])  # the ledger against MemTracker on the CPU
    assert last["memory"]["outcome"] == "ok" and memory.count("measured") == 2, memory
    train = str(last["train"]["numbers"])
    assert last["train"]["outcome"] == "ok", train  # the callback's FLOPs equal FlopCounterMode's
    assert train.startswith("2 steps") and train.count("(ratio 1.0") == 2
    assert train.count("FlopCounterMode saw no attention op") == 2  # CPU flash SDPA has no torch formula
