"""flex's kernel_options for the card an explanation is for, per pass: as data (the explainer's JSON)
and as the one setting its advice names. Measured on this device when it is the one explained, else
estimated against the card's shared memory (`Context.smem_limit`); where no block size fits the card,
the reason instead of options."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tuneproof.attention.kernel_measure import best_choice
from tuneproof.attention.kernel_options import caveats
from tuneproof.core.errors import TuneproofError

if TYPE_CHECKING:
    from tuneproof.attention.dispatch import Context, LayerExplanation


def kernel_options(ctx: Context, layers: list[LayerExplanation]) -> dict[str, Any] | None:
    """flex's kernel_options for this card per pass, as data (None on the CPU or without softmax layers)."""
    if ctx.capability is None or not layers:
        return None
    dims = {x.head_dim for x in layers}
    out: dict[str, Any] = {}
    for p in ("fwd", "bwd") if ctx.training else ("fwd",):
        try:
            c = best_choice(dims, ctx.dtype, ctx.capability, p, smem_limit_bytes=ctx.smem_limit)
        except TuneproofError as e:  # no block size fits this card: flex is no option here, the rest stands
            out[p] = {"options": None, "smem_bytes": None, "smem_limit": ctx.smem_limit,
                      "source": "estimated", "reason": e.message}  # fmt: skip
            continue
        out[p] = {"options": c.options, "smem_bytes": c.smem_bytes, "smem_limit": c.smem_limit,
                  "source": c.source, "reason": c.reason,
                  "caveats": caveats(dims, ctx.dtype, ctx.capability, p, c.smem_limit)
                  if c.source == "estimated" else []}  # fmt: skip
    return out


def flex_options(layers: list[LayerExplanation], ctx: Context) -> tuple[str | None, str]:
    """The one kernel_options setting (`kernel_options`'s passes merged) and why, per pass; None and the
    first unfit pass's reason where no block size fits the card."""
    per_pass = kernel_options(ctx, layers) or {}
    unfit = next((f"{p}: {v['reason']}" for p, v in per_pass.items() if v["options"] is None), None)
    if unfit is not None:
        return None, unfit
    picked = {k: n for v in per_pass.values() for k, n in v["options"].items()}
    why = "; ".join(f"{p}, {v['source']}: {v['reason']}" for p, v in per_pass.items())
    return str(picked or "{} (defaults fit)"), why
