"""Our performed ledger vs torch's FlopCounterMode, per family, and where FlopCounterMode is blind.

Prints, for each supported family (tiny config, random weights, CPU, eager attention, eager
experts, LoRA + activation checkpointing, B=2, T=61): ours / FlopCounterMode's count and the time
each takes (median of 3; the counter's time includes building the model and running the
step it counts). Then three
cases FlopCounterMode cannot count: CPU SDPA (0), grouped_mm experts (0), flex_attention in eager
(crash). Run: .venv/bin/python bench/flops_vs_counter.py
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from tiny_models import TINY, build_model, config_dict, counted_flops, linear_targets  # noqa: E402
from tuneproof.arch import from_config  # noqa: E402
from tuneproof.flops import Step, flop_report  # noqa: E402

B, T, REPEATS = 2, 61, 3


def median_time(fn: Callable[[], Any]) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def one_family(model_type: str) -> str:
    cfg = config_dict(model_type)
    shape = from_config(cfg)
    targets = linear_targets(shape)
    run = Step(
        seq_len=T,
        batch=B,
        attn="eager",
        mode="lora",
        lora_rank=4,
        grad_ckpt=True,
        lora_targets=tuple(targets),
    )
    t_ours, rep = median_time(lambda: flop_report(shape, run))
    t_cnt, counted = median_time(
        lambda: counted_flops(build_model(cfg), B, T, "lora", 4, True, targets=targets)
    )
    ours = rep.performed.total
    return (
        f"{model_type:14s} {ours:12.4e} {counted:12.4e} {ours / counted:8.5f} "
        f"{t_ours * 1e3:7.1f}ms {t_cnt * 1e3:8.1f}ms"
    )


def parity() -> None:
    print(f"== ours / FlopCounterMode (eager, LoRA r=4 + grad-ckpt, B={B}, T={T}; median of {REPEATS})")
    print(f"{'family':14s} {'ours':>12s} {'counter':>12s} {'ratio':>8s} {'t_ours':>9s} {'t_counter':>10s}")
    for model_type in sorted(TINY):
        print(one_family(model_type), flush=True)


def count_forward(model, ids) -> float:
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(input_ids=ids)
    return float(counter.get_total_flops())


def blind_spots() -> None:
    ids = torch.randint(0, 200, (B, T))
    print("\n== where FlopCounterMode is blind (forward, B=2, T=61)")
    cfg = config_dict("llama")
    shape = from_config(cfg)
    eager = count_forward(build_model(cfg, attn="eager"), ids)
    sdpa = count_forward(build_model(cfg, attn="sdpa"), ids)
    attn_ours = flop_report(shape, Step(seq_len=T, batch=B, attn="sdpa", mode="forward")).performed.where(
        component_prefix="attention"
    )
    print(
        f"CPU SDPA:          counter total drops by {eager - sdpa:.4e} from eager to sdpa: all of eager's "
        f"attention, i.e. it counts 0 for SDPA; ours counts {attn_ours:.4e} (causal triangle)"
    )

    g4 = config_dict("gemma4_text")
    config = AutoConfig.for_model("gemma4_text", **{k: v for k, v in g4.items() if k != "model_type"})
    torch.manual_seed(0)
    grouped = count_forward(AutoModelForCausalLM.from_config(config, attn_implementation="eager"), ids)
    ours = flop_report(from_config(g4), Step(seq_len=T, batch=B, attn="eager", mode="forward")).performed
    print(
        f"grouped_mm experts: counter {grouped:.4e} vs ours {ours.total:.4e}: "
        f"undercount {100 * (1 - grouped / ours.total):.1f} % "
        f"= the experts' {ours.by('component')['experts']:.4e}"
    )

    flex = build_model(cfg, attn="flex_attention")
    try:
        got = count_forward(flex, ids)
        print(f"flex_attention:    counter returned {got:.4e} (no crash on this torch)")
    except Exception as e:  # the point of this line is to show the failure
        msg = str(e).splitlines()[0][:110]
        print(f"flex_attention:    counter crashes in eager: {type(e).__name__}: {msg}")
    flex_ours = flop_report(shape, Step(seq_len=T, batch=B, attn="flex_attention", mode="forward")).performed
    print(
        f"                   ours counts flex attention as "
        f"{flex_ours.where(component_prefix='attention'):.4e} "
        "(whole 128x128 blocks)"
    )


if __name__ == "__main__":
    torch.set_num_threads(2)
    parity()
    blind_spots()
