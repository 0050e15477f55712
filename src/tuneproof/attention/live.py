"""The dispatch chain asked of the installed libraries on the device present ("live"), where the
explainer otherwise applies the rule table (`tuneproof.attention.rules`, "predicted"):
transformers' `_ignore_causal_mask_sdpa` for the mask, `torch._fused_sdp_choice` and
`can_use_*(..., debug=True)` for the SDPA backend and its refusals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuneproof.attention import rules as R
from tuneproof.attention.paths import path
from tuneproof.core.dtypes import torch_dtype

if TYPE_CHECKING:
    from tuneproof.arch.shape import AttentionSpec
    from tuneproof.attention.dispatch import Context

# The live SDPA check uses the real heads and head_dim but this many tokens: the dispatch rules do not
# depend on the length, and the full width could need gigabytes of mask.
LIVE_LEN = 256


def live_mask(ctx: Context, spec: AttentionSpec) -> tuple[bool, str] | None:
    """Ask transformers' own `_ignore_causal_mask_sdpa` (sdpa, unpacked only). The padding mask handed
    to it is two tokens wide: the function reads only whether it is all ones, and a (batch, seq_len)
    tensor could need gigabytes."""
    if ctx.attn != "sdpa" or ctx.packed:
        return None
    try:
        import torch
        from transformers.masking_utils import _ignore_causal_mask_sdpa
    except ImportError:
        return None
    padding = torch.ones(1, 2, dtype=torch.bool)
    if ctx.padded:
        padding[0, -1] = False
    materialised = not bool(_ignore_causal_mask_sdpa(padding, ctx.seq_len, ctx.seq_len, 0, 0, spec.window))
    predicted = path(ctx.attn).mask(ctx.rows, spec.window)
    if materialised != predicted.materialised:
        return materialised, (
            "transformers._ignore_causal_mask_sdpa says mask "
            f"{'materialised' if materialised else 'skipped'}, "
            "unlike the rule table: the installed transformers differs from the verified one"
        )
    return materialised, predicted.reason + " (asked transformers._ignore_causal_mask_sdpa)"


def live_sdpa(ctx: Context, spec: AttentionSpec, mask: bool) -> tuple[str, dict[str, str], str]:
    """Ask PyTorch which SDPA backend it picks for these shapes on the device present: (backend,
    refusal reason per higher-priority backend, kernel)."""
    import warnings

    import torch
    from torch.nn.attention import SDPBackend

    device = "cpu" if ctx.capability is None else "cuda"
    dtype = torch_dtype(ctx.dtype)
    t = min(ctx.seq_len, LIVE_LEN)
    batch = min(ctx.batch, 2)  # the rules do not depend on the batch size either
    # what transformers passes (integrations/sdpa_attention.py): K/V keep their kv heads with
    # enable_gqa only without a mask and with equal head_dims up to 256, else repeat_kv copies them
    gqa = spec.num_kv_heads != spec.num_heads and not mask and spec.head_dim == spec.v_head_dim <= 256
    kv_heads = spec.num_kv_heads if gqa else spec.num_heads
    grad = ctx.training
    q = torch.zeros(batch, spec.num_heads, t, spec.head_dim, device=device, dtype=dtype, requires_grad=grad)
    k = torch.zeros(batch, kv_heads, t, spec.head_dim, device=device, dtype=dtype, requires_grad=grad)
    v = torch.zeros(batch, kv_heads, t, spec.v_head_dim, device=device, dtype=dtype, requires_grad=grad)
    attn_mask = torch.ones(batch, 1, t, t, device=device, dtype=torch.bool) if mask else None
    dropout = ctx.sdpa_dropout
    chosen = torch._fused_sdp_choice(q, k, v, attn_mask, dropout, not mask, enable_gqa=gqa)
    choice = SDPBackend(int(chosen))
    names = {
        SDPBackend.FLASH_ATTENTION: "flash",
        SDPBackend.EFFICIENT_ATTENTION: "efficient",
        SDPBackend.CUDNN_ATTENTION: "cudnn",
        SDPBackend.MATH: "math",
    }
    backend = names.get(choice, choice.name.lower())
    if device == "cpu":
        backend = "cpu_flash" if backend == "flash" else backend
        why = R.cpu_refusal(dropout, spec.head_dim, spec.v_head_dim)
        refused = (
            {} if backend == "cpu_flash" else {"cpu_flash": "torch._fused_sdp_choice did not pick flash"}
        )
        if backend != "cpu_flash":
            refused["cpu_flash"] += f": {why}" if why else " (the rule table expected it: torch differs here)"
        return backend, refused, R.sdpa_kernel(backend, spec.head_dim)
    from torch.backends import cuda as tbc

    params = tbc.SDPAParams(q, k, v, attn_mask, dropout, not mask, gqa)
    refused = {}
    for name, fn in (
        ("flash", tbc.can_use_flash_attention),
        ("efficient", tbc.can_use_efficient_attention),
        ("cudnn", tbc.can_use_cudnn_attention),
    ):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ok = fn(params, debug=True)
        if not ok:
            refused[name] = "; ".join(str(w.message).strip() for w in caught) or "refused (no reason given)"
        if name == backend:
            break
    return backend, refused, R.sdpa_kernel(backend, spec.head_dim, ctx.capability or (8, 0))


def device_present(ctx: Context) -> bool:
    """Is the device `ctx` explains for the one this process runs on (the CPU always is)?"""
    import torch

    if ctx.capability is None:
        return True
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == ctx.capability


def version_notes() -> list[str]:
    """A note when the installed torch / transformers are not the versions the rules were verified on."""
    import torch
    import transformers

    notes = []
    tv, hv = torch.__version__.split("+")[0], transformers.__version__
    if not tv.startswith(R.VERIFIED_TORCH) or not hv.startswith(R.VERIFIED_TRANSFORMERS):
        notes.append(
            f"rules verified on torch {R.VERIFIED_TORCH} / transformers {R.VERIFIED_TRANSFORMERS}; "
            f"installed torch {tv} / transformers {hv}: predictions may drift"
        )
    return notes
