"""Sliding-window attention forward on this CPU: compiled flex vs SDPA with the materialised mask
(what transformers does once the width reaches the window) vs SDPA is_causal (dense causal, no
window: the floor SDPA reaches without a mask). Ratios from one run, medians of 5 after warm-up.

Run: .venv/bin/python bench/flex_vs_sdpa.py   (GPU variant: bench/gpu_flex_vs_sdpa.py)
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

from tuneproof.attention.flex import sliding_block_mask
from tuneproof.measure.timing import time_fn

warnings.filterwarnings("ignore")
B, H, D, WINDOW = 1, 4, 64, 512


def bench(width: int) -> None:
    q, k, v = (torch.randn(B, H, width, D) for _ in range(3))
    idx = torch.arange(width)
    dense_mask = (idx[None, :] <= idx[:, None]) & (idx[:, None] - idx[None, :] < WINDOW)
    block_mask = sliding_block_mask(width, WINDOW)
    flex = torch.compile(flex_attention, dynamic=False)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=dense_mask)
    err = float((flex(q, k, v, block_mask=block_mask) - ref).abs().max())
    t_flex = time_fn(lambda: flex(q, k, v, block_mask=block_mask), repeats=5, warmup=2)
    t_mask = time_fn(
        lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=dense_mask), repeats=5, warmup=2
    )
    t_causal = time_fn(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), repeats=5, warmup=2)
    print(
        f"T={width:5d} window={WINDOW}: flex {t_flex.median_s * 1e3:8.2f} ms | sdpa+mask "
        f"{t_mask.median_s * 1e3:8.2f} ms | sdpa causal {t_causal.median_s * 1e3:8.2f} ms | "
        f"sdpa+mask/flex {t_mask.median_s / t_flex.median_s:5.2f}x | sdpa causal/flex "
        f"{t_causal.median_s / t_flex.median_s:5.2f}x | max |flex - sdpa+mask| {err:.1e}"
    )


if __name__ == "__main__":
    torch.set_num_threads(2)
    print(
        f"sliding-window attention forward, B={B} H={H} D={D}, fp32, CPU ({torch.get_num_threads()} threads)"
    )
    for width in (4096, 8192):
        bench(width)
