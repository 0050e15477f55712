"""The device check at the reference run's scale, for one lent CUDA device, under 9 minutes in all.

A Gemma-4-shaped model (sliding layers head_dim 256 with a 1,024 window, a global layer head_dim 512,
6 layers, dense MLP, random bf16 weights; `gpu_check_steps.model_config`) is built and saved once;
then, each step in its own process with its own time limit (STEPS below):
- dispatch: live dispatch equals the predicted one for every layer, at 2k-16k, padded and unpadded;
- sdpa grid: torch's own backend choice on the card, with its real cuDNN, against the chooser;
- flex options: every option the chooser picks compiles and runs fwd and bwd; torch's defaults too,
  also without inductor's one-stage retry, their Triton "Required" beside the estimate;
- probe: the fit's and the kernel table's quadratic shares cross-checked at 3 widths;
- flex vs sdpa: the model's step time at 2k-16k;
- train: `tuneproof train` with flex, the callback's FLOPs and MFU against FlopCounterMode's count
  (outside attention they must agree; attention side by side: torch counts flex's full square);
- memory: the memory ledger's predicted peak against torch.cuda.max_memory_allocated, one LoRA step
  at 4k with and without checkpointing, and what the allocator reserved beyond it.
No step starts past the global deadline (those are listed as skipped). The summary table is printed
and written to bench/results/gpu-<device>.txt.

Run:  python bench/gpu_check.py            (from the repository root, on a CUDA machine)
      python bench/gpu_check.py --dry-run  (anywhere: the steps, budgets and outputs; no CUDA)
Rehearsal: `pytest tests/contract/test_bench_gpu_check.py` runs every step's code on a CPU at a small scale.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DEADLINE_S = 520  # no step starts after this; with the last step's limit clamped to it, under 9 min
ROW = "ROW "  # a step's result line on stdout: ROW {"outcome": ..., "numbers": ...}


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    budget_s: int
    does: str


STEPS = (
    Step(
        "build",
        45,
        "build the model on CUDA (bf16, random), save it, a tokenizer and data to the work folder",
    ),
    Step("dispatch", 20, "live vs predicted dispatch per layer, widths 2k/4k/8k/16k, padded and unpadded"),
    Step("sdpa_grid", 25, "torch._fused_sdp_choice on this card and its cuDNN vs the chooser, 504 cases"),
    Step(
        "flex_options", 140, "chosen flex options and torch defaults (with and without the one-stage retry)"
    ),
    Step("probe", 80, "probe library: fit vs kernel table at 2k/4k/8k, SDPA training step"),
    Step("flex_vs_sdpa", 90, "model fwd+bwd step time, SDPA vs flex, widths 2k/4k/8k/16k"),
    Step("train", 90, "tuneproof train with flex, 4 steps; callback FLOPs/MFU vs FlopCounterMode"),
    Step("memory", 30, "memory ledger's peak vs torch.cuda.max_memory_allocated, LoRA T=4k, +-ckpt"),
)


def slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def dry_run() -> int:
    print(f"gpu_check dry run: {len(STEPS)} steps, each in its own process; global deadline {DEADLINE_S} s")
    print(f"{'step':14s} {'budget':>7s}  what")
    for s in STEPS:
        print(f"{s.name:14s} {s.budget_s:5d} s  {s.does}")
    print(f"{'total':14s} {sum(s.budget_s for s in STEPS):5d} s  (no step starts past {DEADLINE_S} s)")
    print(f"writes: {RESULTS.relative_to(ROOT)}/gpu-<device-name-slug>.txt (the summary table)")
    print("work folder: a temporary folder (model, tokenizer, data, run), removed at the end")
    return 0


def run_step(step: Step, work: Path, limit_s: float) -> dict[str, object]:
    """Run one step in a child process under `limit_s`; its last ROW line (or what went wrong)."""
    cmd = [
        sys.executable,
        str(Path(__file__)),
        "--step",
        step.name,
        "--work",
        str(work),
        "--budget",
        str(limit_s),
    ]
    t0 = time.perf_counter()
    timed_out = False
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s, check=False)
        stdout, stderr, code = out.stdout, out.stderr, out.returncode
    except subprocess.TimeoutExpired as e:
        timed_out, code = True, None
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        stderr = e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr or ""
    (work / f"{step.name}.log").write_text(stdout + "\n--- stderr ---\n" + stderr)
    rows = [json.loads(line[len(ROW) :]) for line in stdout.splitlines() if line.startswith(ROW)]
    row: dict[str, object] = rows[-1] if rows else {"outcome": "fail", "numbers": ""}
    if timed_out:
        row = {"outcome": "timeout", "numbers": f"stopped at its limit of {limit_s:.0f} s; {row['numbers']}"}
    elif code != 0:
        lines = [x for x in stderr.strip().splitlines() if x.strip()]
        errors = [x for x in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b", x)]
        last = (errors or lines or ["no output"])[-1]
        row = {"outcome": "fail", "numbers": f"exit {code}: {last[:300]}; {row['numbers']}".rstrip("; ")}
    row["seconds"] = time.perf_counter() - t0
    for line in stdout.splitlines():
        if not line.startswith(ROW):
            print(line)
    return row


def table(device: str, rows: dict[str, dict[str, object]], skipped: dict[str, str], total_s: float) -> str:
    lines = [device, "", f"{'step':14s} {'outcome':8s} {'seconds':>7s}  numbers"]
    for name, row in rows.items():
        lines.append(f"{name:14s} {row['outcome']!s:8s} {float(row['seconds']):7.1f}  {row['numbers']}")  # type: ignore[arg-type]
    for name, why in skipped.items():
        lines.append(f"{name:14s} {'skipped':8s} {'':>7s}  not started: {why}")
    lines.append(f"\ntotal {total_s:.0f} s (deadline {DEADLINE_S} s)")
    return "\n".join(lines) + "\n"


def device_line() -> str:
    import torch
    import transformers

    cap = torch.cuda.get_device_capability(0)
    from gpu_check_steps import smem_optin

    smem = smem_optin()
    return (
        f"{torch.cuda.get_device_name(0)} sm_{cap[0]}{cap[1]} ({smem:,} B smem/block), "
        f"torch {torch.__version__}, triton {_triton()}, transformers {transformers.__version__}, "
        f"cuDNN {torch.backends.cudnn.version()}"
    )


def _triton() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("triton")
    except PackageNotFoundError:
        return "absent"


def check_all() -> int:
    import torch

    device = device_line()
    print(device, flush=True)
    t0 = time.perf_counter()
    rows: dict[str, dict[str, object]] = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        for step in STEPS:
            spent = time.perf_counter() - t0
            if spent > DEADLINE_S:
                skipped[step.name] = f"{spent:.0f} s spent, past the {DEADLINE_S} s deadline"
                continue
            if step.name != "build" and rows.get("build", {}).get("outcome") != "ok":
                skipped[step.name] = "the build step failed: no model to check"
                continue
            print(
                f"\n== {step.name} (limit {min(step.budget_s, DEADLINE_S - spent):.0f} s): {step.does}",
                flush=True,
            )
            rows[step.name] = run_step(step, Path(tmp), max(10.0, min(step.budget_s, DEADLINE_S - spent)))
    text = table(device, rows, skipped, time.perf_counter() - t0)
    print("\n" + text)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"gpu-{slug(torch.cuda.get_device_name(0))}.txt"
    out.write_text(text)
    print(f"written to {out.relative_to(ROOT)}")
    return 0


def child(name: str, work: Path, budget_s: float) -> int:
    """One step in this process (`--step`): its rows printed as ROW lines."""
    import gpu_check_steps as steps

    def emit(row: dict[str, object]) -> None:
        print(ROW + json.dumps(row), flush=True)

    getattr(steps, f"step_{name}")(work, budget_s, emit)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="list the steps and budgets; no CUDA")
    parser.add_argument("--step", choices=[s.name for s in STEPS], help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--budget", type=float, default=60.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run()
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA device: this check runs on a GPU (--dry-run lists its steps)", file=sys.stderr)
        return 2
    if args.step:
        return child(args.step, args.work, args.budget)
    return check_all()


if __name__ == "__main__":
    sys.exit(main())
