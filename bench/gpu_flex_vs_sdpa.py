"""GPU variant of bench/flex_vs_sdpa.py, prepared for a GPU machine (not run in CI).

Forward and backward at T=16384, window 1024, head_dim 256 (sliding layers) and 512 (global
layers), bf16, 16 heads, batch 1: compiled flex with the kernel options tuneproof chooses for this
card vs SDPA with the materialised mask vs SDPA is_causal. Also checks that the chosen options
compile (no out-of-resource error) and records the recompile guard at work.

Run: python bench/gpu_flex_vs_sdpa.py
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

from tuneproof.attention.flex import RecompileGuard, causal_block_mask, sliding_block_mask
from tuneproof.attention.kernel_options import choose_kernel_options
from tuneproof.measure.timing import time_fn

T, WINDOW, H, B = 16384, 1024, 16, 1


def run(head_dim: int, sliding: bool, cap: tuple[int, int]) -> None:
    q, k, v = (
        torch.randn(B, H, T, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    block_mask = sliding_block_mask(T, WINDOW, "cuda") if sliding else causal_block_mask(T, "cuda")
    opts: dict[str, int] = {}
    for p in ("fwd", "bwd"):
        c = choose_kernel_options(head_dim, "bf16", capability=cap, pass_=p)
        opts.update(c.options)
        print(f"  {p}: {c.reason}")
    flex = torch.compile(flex_attention)
    idx = torch.arange(T, device="cuda")
    mask = idx[None, :] <= idx[:, None]
    if sliding:
        mask &= idx[:, None] - idx[None, :] < WINDOW

    def fwd_bwd(fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def step() -> None:
            fn().sum().backward()

        return step

    cases = {
        "flex": lambda: flex(q, k, v, block_mask=block_mask, kernel_options=opts),
        "sdpa+mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        "sdpa causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }
    times = {}
    for name, fn in cases.items():
        try:
            f = time_fn(fn, repeats=5, warmup=2)  # the default clock synchronises CUDA
            fb = time_fn(fwd_bwd(fn), repeats=5, warmup=2)
            times[name] = (f.median_s, fb.median_s)
            print(f"  {name:12s} fwd {f.median_s * 1e3:8.2f} ms  fwd+bwd {fb.median_s * 1e3:8.2f} ms")
        except Exception as e:  # report and go on: one backend failing must not hide the others
            print(f"  {name:12s} failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    if "flex" in times:
        for name, (f, fb) in times.items():
            if name != "flex":
                print(f"  {name}/flex: fwd {f / times['flex'][0]:.2f}x, fwd+bwd {fb / times['flex'][1]:.2f}x")


if __name__ == "__main__":
    cap = torch.cuda.get_device_capability()
    print(f"{torch.cuda.get_device_name()} (sm_{cap[0]}{cap[1]}), torch {torch.__version__}")
    with RecompileGuard(widths=(T,), num_variants=2):
        for head_dim, sliding in ((256, True), (512, False)):
            print(f"head_dim {head_dim}, {'sliding window ' + str(WINDOW) if sliding else 'causal'}, T={T}")
            run(head_dim, sliding, cap)
