"""What runs for each mixer that is not plain softmax attention, read from the transformers
modeling file that defines it: linear attention and state-space cores, differential attention,
mixture-of-attention heads, ZAYA's CCA convolutions and sparse-attention indexers. The explainer
(`tuneproof.attention.dispatch.explain`) appends these notes to its per-layer table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from tuneproof.arch.shape import LayerShape, ModelShape


def mixer_notes(shape: ModelShape, is_packed: bool) -> list[str]:
    """Every mixer note for `shape`; `is_packed` when the batch packs several documents per row."""
    from tuneproof.arch.cca import cca_notes
    from tuneproof.arch.indexer import indexed_attention_notes
    from tuneproof.arch.moa import moa_notes
    from tuneproof.arch.ssd_notes import ssd_notes

    # the architecture's own notes first (read from the shape), then the attention path's
    ssd, cca, moa = ssd_notes(shape, is_packed), cca_notes(shape), moa_notes(shape)
    indexed = indexed_attention_notes(shape)
    notes = linear_attention_notes(shape, is_packed) + ssd + repeated_call_notes(shape)
    return notes + cca + moa + indexed


# transformers models/qwen3_next/modeling_qwen3_next.py: chunk_gated_delta_rule and causal_conv1d_fn are
# `use_kernel_func_from_hub_with_fallback` functions (the `kernels` hub's flash-linear-attention and
# causal-conv1d builds on CUDA). The layer passes a packed batch's cu_seq_lens_q as cu_seqlens, and the
# wrapper (integrations/hub_kernels.py) raises on a torch fallback given cu_seqlens: "can't keep packed
# sequences apart without flash-linear-attention".
_DELTA_PATHS = (
    "{count} linear-attention layers ({label}, gated delta rule): the attention path does not apply to "
    "them. transformers runs flash-linear-attention's chunk_gated_delta_rule and causal-conv1d where the "
    "kernels hub provides them (CUDA), else torch_chunk_gated_delta_rule (chunks of 64 tokens, padded to a "
    "whole chunk) and a torch depthwise conv1d{packed}"
)
_DELTA_PACKED = (
    "; this batch is packed: the fla kernel keeps its documents apart (cu_seqlens), and without "
    "flash-linear-attention transformers raises (its torch fallback cannot), so packing needs fla"
)


def _core_notes() -> dict[type, Callable[[Any, int, str, bool], str]]:
    """Each mixer core's explainer line, (core, layer count, geometry label, packed) -> str. Mamba-2's
    SSD is left to `ssd_notes`, which also counts the SSD cores inside attention layers."""
    from tuneproof.arch.kda import KimiDelta, kda_note
    from tuneproof.arch.lightning import Lightning, lightning_note
    from tuneproof.arch.mlstm import MLstm, mlstm_note
    from tuneproof.arch.recurrent import RgLru, Wkv, recurrent_note
    from tuneproof.arch.selective_scan import SelectiveScan, selective_scan_note
    from tuneproof.arch.shape import DeltaRule
    from tuneproof.arch.short_conv import ShortConv, short_conv_note

    def delta(_: Any, count: int, label: str, packed: bool) -> str:
        return _DELTA_PATHS.format(count=count, label=label, packed=_DELTA_PACKED if packed else "")

    return {
        DeltaRule: delta,
        SelectiveScan: lambda _, n, label, packed: selective_scan_note(n, label, packed),
        KimiDelta: lambda _, n, label, packed: kda_note(n, label, packed),
        Lightning: lambda _, n, label, packed: lightning_note(n, label, packed),
        ShortConv: lambda _, n, label, packed: short_conv_note(n, label, packed),
        RgLru: recurrent_note,
        Wkv: recurrent_note,
        MLstm: mlstm_note,
    }


def linear_attention_notes(shape: ModelShape, is_packed: bool) -> list[str]:
    """What runs for each linear-attention geometry (no mask, no SDPA backend): the line of its
    layers' first core that `_core_notes` knows (a core it does not know gets no line; Mamba-2's SSD
    cores are `tuneproof.arch.ssd_notes`')."""
    by_type = _core_notes()
    notes: list[str] = []
    for label, idxs in shape.mixer_groups.items():
        core = next((s for s in shape.layers[idxs[0]].steps if type(s) in by_type), None)
        if core is not None:
            notes.append(by_type[type(core)](core, len(idxs), label, is_packed))
    return notes


def repeated_calls(layer: LayerShape) -> int:
    """The mixer's own attention calls on one q and k (`tuneproof.arch.mixers.ATTENTION_CALLS`:
    `MixerKind.core_steps` writes that many Attention steps reading the same q and k). Attention
    sub-layers (LongCat-Flash, `tuneproof.arch.sublayers`) each read their own q and k: one call each."""
    from tuneproof.arch.shape import Attention

    on_qk = Counter((s.q, s.k) for s in layer.steps if isinstance(s, Attention))
    return max(on_qk.values(), default=0)


def repeated_call_notes(shape: ModelShape) -> list[str]:
    """Layers whose mixer calls the attention interface more than once on the same q and k
    (DiffLlama's differential attention, `tuneproof.arch.mixers.ATTENTION_CALLS`)."""
    calls = [repeated_calls(layer) for layer in shape.layers]
    if max(calls, default=0) < 2:
        return []
    return [
        f"{sum(c > 1 for c in calls)} layers run differential attention (DiffLlamaAttention.forward): "
        "two attention calls on the same q and k, one per half of V, so the chosen path's kernel runs "
        "twice per layer (each fused backward recomputing its own QK^T). transformers offers no "
        "differential kernel: each call goes through ALL_ATTENTION_FUNCTIONS (eager, sdpa, "
        "flash_attention_2, flex_attention) with head_dim_v == head_dim, which flash needs"
    ]
