"""One prepared script for a GPU machine (the device tool lends one for ~15 minutes): the checks
that cannot run on this CPU, in order of value, each bounded in time.

1. Dispatch explainer: live (PyTorch's own can_use_* with debug reasons) vs the predicted rule
   table, on this card, over a grid of head_dim x mask x training x dtype. Prints every mismatch.
2. The CUDA-only tests (pytest skips them without a GPU).
3. The probe on the embedded tiny model, training step, on CUDA: fit vs kernel table.
4. bench/gpu_flex_vs_sdpa.py (flex with the chosen kernel options vs SDPA, 16k, head_dim 256/512).
0. First, the acceptance gate's generator on CUDA: `tuneproof generate` on the tiny model, two arms,
   then `tuneproof gate` on them (the same model twice: it must say INCONCLUSIVE, exit 3).

Each step has its own time limit and the script stops starting steps past DEADLINE_S, so that one call
of the device tool (10 minutes at most) holds all of it.

Run: python bench/gpu_check.py   (from the repository root, with the package installed)
"""

from __future__ import annotations

import subprocess
import sys
import time

import torch


def dispatch_grid() -> int:
    from tuneproof.arch.shape import AttentionSpec
    from tuneproof.attention.dispatch import Context, _live_sdpa, predict

    cap = torch.cuda.get_device_capability()
    mismatches = 0
    for head_dim in (64, 128, 192, 256, 512):
        for padded in (False, True):
            for training in (False, True):
                for dtype in ("bf16", "fp32"):
                    ctx = Context(
                        seq_len=4096, batch=2, padded=padded, training=training, dtype=dtype, capability=cap
                    )
                    spec = AttentionSpec("full", None, 16, 16, head_dim, head_dim)
                    mask, _, backend, _, _ = predict(ctx, spec)
                    live = _live_sdpa(ctx, spec, mask)
                    assert live is not None
                    ok = live[0] == backend
                    mismatches += not ok
                    print(
                        f"{'ok  ' if ok else 'DIFF'} d={head_dim:3d} mask={mask!s:5s} train={training!s:5s} "
                        f"{dtype}: predicted {backend:9s} live {live[0]:9s}"
                        + ("" if ok else f"  live refusals: {live[1]}")
                    )
    return mismatches


DEADLINE_S = 480
CLI = [sys.executable, "-c", "import sys; from tuneproof.cli.app import main; sys.exit(main(sys.argv[1:]))"]


def gate_on_cuda() -> None:
    import json
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp())
    prompts = folder / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt_id": f"q{i}", "prompt": f"Tell me about {i}"}) + "\n" for i in range(16))
    )
    for name, seed in (("base", 0), ("tuned", 100)):
        t0 = time.time()
        args = [
            "generate",
            "--model",
            "tiny",
            "--prompts",
            str(prompts),
            "--runs",
            "2",
            "--samples",
            "4",
            "--max-new-tokens",
            "48",
            "--seed",
            str(seed),
            "--out",
            str(folder / f"{name}.jsonl"),
        ]
        out = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)
        meta = json.loads((folder / f"{name}.meta.json").read_text()) if out.returncode == 0 else {}
        print(
            f"generate {name}: exit {out.returncode} in {time.time() - t0:.1f} s, device "
            f"{meta.get('generation', {}).get('device')}, {out.stdout.strip() or out.stderr[-500:]}"
        )
    gate = subprocess.run(
        [*CLI, "gate", "--base", str(folder / "base.jsonl"), "--tuned", str(folder / "tuned.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print(
        gate.stdout[-1500:], gate.stderr[-500:], f"gate exit {gate.returncode} (3 expected: same model twice)"
    )


def main() -> None:
    print(
        f"{torch.cuda.get_device_name()} sm_{''.join(map(str, torch.cuda.get_device_capability()))}, "
        f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}"
    )
    t0 = time.time()
    print("\n== 0. tuneproof generate on CUDA, then gate")
    gate_on_cuda()
    sys.stdout.flush()
    print(f"\n== 1. dispatch: live vs predicted\n{dispatch_grid()} mismatches")
    tests = [
        "tests/test_probe.py",
        "tests/test_attention_dispatch.py",
        "tests/test_gate.py",
        "-k",
        "cuda or live",
    ]
    probe = ["probe", "--device", "cuda", "--widths", "1024,2048,4096", "--batch", "2", "--budget", "60"]
    steps = [
        ("2. CUDA-only tests", [sys.executable, "-m", "pytest", "-q", "-p", "no:warnings", *tests], 200),
        ("3. probe, training step on CUDA", [*CLI, *probe], 150),
        ("4. flex vs SDPA at 16k", [sys.executable, "bench/gpu_flex_vs_sdpa.py"], 300),
    ]
    for title, cmd, limit in steps:
        spent = time.time() - t0
        if spent > DEADLINE_S:
            print(f"\nstopped before {title}: {spent:.0f} s spent, past {DEADLINE_S} s")
            break
        print(f"\n== {title}", flush=True)
        left = min(limit, 560 - spent)
        try:
            subprocess.run(cmd, check=False, timeout=left)
        except subprocess.TimeoutExpired:
            print(f"{title}: stopped at its limit of {left:.0f} s")
    print(f"\ntotal {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
