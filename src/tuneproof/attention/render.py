"""Human-readable output for the attention tools (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from tuneproof.attention.dispatch import Explanation, LayerExplanation


def _calls(x: LayerExplanation) -> str:
    """ ", 56 attention calls" where the layers call attention more than once each (LongCat-Flash's
    two attention sub-layers, DiffLlama's differential pair)."""
    return f", {x.attention_calls} attention calls" if x.attention_calls > x.num_layers else ""


def render_explanation(result: Explanation, console: Console) -> None:
    from rich.markup import escape

    c = result.context
    if result.model:
        # on its own line, never wrapped: where a path breaks depends on where the checkout lives
        console.print(f"[bold]model[/bold]: {escape(result.model)}", soft_wrap=True)
    console.print(
        "[bold]attention dispatch[/bold]"
        + f" on {c.device}: attn={c.attn}, T={c.seq_len}, B={c.batch}"
        + (", padded" if c.padded else "")
        + (", packed" if c.packed else "")
        + f", {c.dtype}"
        + (", training" if c.training else "")
    )
    if c.smem_limit is not None:
        console.print(f"shared memory per block: {c.smem_limit:,} B ({escape(c.smem_source or '?')})")
    if result.stack is not None:
        console.print(f"SDPA's chooser read: {escape(result.stack.line())}")
    for x in result.layers:
        console.print(
            f"\n[bold]{x.layer_type} layers[/bold] ({x.num_layers}{_calls(x)}): head_dim {x.head_dim}, "
            f"{x.num_heads} heads / {x.num_kv_heads} kv heads ({x.source})"
        )
        console.print(
            f"  mask materialised: {'yes' if x.mask_materialised else 'no'} - {escape(x.mask_reason)}"
        )
        for name, reason in x.refused.items():
            console.print(f"  {name} refused: {escape(reason)}")
        console.print(f"  backend: {x.backend} -> {escape(x.kernel)}")
    if result.advice:
        console.print("\n[bold]advice[/bold]")
        for a in result.advice:
            console.print(f"  - {escape(a)}")
    for n in result.notes:
        console.print(f"note: {escape(n)}")
    if result.isolation is not None:
        iso = result.isolation
        console.print(f"\n[bold]packed documents, live[/bold] ({escape(str(iso['model']))})")
        console.print(f"  {escape(str(iso['summary']))}")
