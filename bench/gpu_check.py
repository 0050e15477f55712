"""One prepared script for a GPU machine (the device tool lends one for ~15 minutes): the checks
that cannot run on this CPU, in order of value, each bounded in time.

1. Dispatch explainer: live (PyTorch's own can_use_* with debug reasons) vs the predicted rule
   table, on this card, over a grid of head_dim x mask x training x dtype. Prints every mismatch.
2. The CUDA-only tests (pytest skips them without a GPU).
3. The probe on the embedded tiny model, training step, on CUDA: fit vs kernel table.
4. bench/gpu_flex_vs_sdpa.py (flex with the chosen kernel options vs SDPA, 16k, head_dim 256/512).

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


def main() -> None:
    print(
        f"{torch.cuda.get_device_name()} sm_{''.join(map(str, torch.cuda.get_device_capability()))}, "
        f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}"
    )
    t0 = time.time()
    print(f"\n== 1. dispatch: live vs predicted\n{dispatch_grid()} mismatches")
    print("\n== 2. CUDA-only tests")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:warnings",
            "tests/test_probe.py",
            "tests/test_attention_dispatch.py",
            "-k",
            "cuda or live",
        ],
        check=False,
        timeout=240,
    )
    print("\n== 3. probe, training step on CUDA")
    subprocess.run(
        [
            "tuneproof",
            "probe",
            "--device",
            "cuda",
            "--widths",
            "1024,2048,4096",
            "--batch",
            "2",
            "--budget",
            "60",
        ],
        check=False,
        timeout=240,
    )
    print("\n== 4. flex vs SDPA at 16k")
    subprocess.run([sys.executable, "bench/gpu_flex_vs_sdpa.py"], check=False, timeout=300)
    print(f"\ntotal {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
