"""MiniMax's lightning attention: linear attention with a fixed per-head exponential decay, run
block by block (an exact softmax-free score matrix inside each block, a running key-value state
between blocks).

Source (transformers 5.x): models/minimax/modeling_minimax.py `MiniMaxLightningAttention.forward`,
its block loop over `config.block_size` tokens (the `attn_weights_inter is None` branch, which a
forward without a filled cache takes). The last block is as long as what is left: nothing is padded.

Convention: matmul FLOPs, as FlopCounterMode counts them (the decay products are elementwise).
The eager block loop is the algorithm itself (it mirrors the lightning-attention kernel's tiling),
so intended and performed are the same count. transformers offers no kernel for it: this loop is
what runs on every device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuneproof.arch.shape import AttentionSpec, Core


@dataclass(kw_only=True, frozen=True, slots=True)
class Lightning(Core):
    """Lightning attention (`MiniMaxLightningAttention`): `heads` heads of `head_dim` (queries,
    keys and values alike) with a (head_dim x head_dim) state per head, blocks of `block` tokens.
    No convolution."""

    heads: int
    head_dim: int
    block: int


def _blocks(rule: Lightning, length: int) -> list[int]:
    whole, rest = divmod(length, rule.block)
    return [rule.block] * whole + ([rest] if rest else [])


def lightning_flops(rule: Lightning, length: int) -> float:
    """Forward FLOPs of one sequence of `length` tokens through a lightning-attention layer. Per head
    and block of b tokens (head dim d): the intra-block scores Q K^T and their decayed product with
    V (b x b x d each), the inter-block read-out (Q * decay) @ S and the state update (K * decay)^T @ V
    (b x d x d each)."""
    d = rule.head_dim
    return rule.heads * sum(2.0 * (2 * b * b * d + 2 * b * d * d) for b in _blocks(rule, length))


def lightning_backward(rule: Lightning, length: int) -> float:
    """Backward FLOPs of `lightning_flops`'s matmuls when q, k and v need gradients (checked against
    FlopCounterMode on the module's block loop): two input gradients per matmul, except that the
    state is zeros before the first block (its read-out needs the query's gradient only) and the
    last block's state update feeds nothing (no backward at all)."""
    blocks = _blocks(rule, length)
    if not blocks:
        return 0.0
    d = rule.head_dim
    first_state = 2.0 * blocks[0] * d * d
    last_update = 2.0 * 2.0 * blocks[-1] * d * d
    return 2 * lightning_flops(rule, length) - rule.heads * (first_state + last_update)


def lightning_costs(rule: Any, length: int) -> tuple[float, float, float]:
    """(forward core, forward convolution, backward core): the entry in `mixers.CORE_COSTS`."""
    return lightning_flops(rule, length), 0.0, lightning_backward(rule, length)


# Mixer classes that run this block loop (checked on minimax's tiny build).
LIGHTNING_MIXERS = frozenset({"MiniMaxLightningAttention"})


def read_lightning(mod: Any) -> tuple[AttentionSpec, Lightning]:
    """A lightning layer's geometry and core, from the built `MiniMaxLightningAttention`."""
    heads, dim, block = int(mod.num_attention_heads), int(mod.head_dim), int(mod.block_size)
    core = Lightning(q="q", k="k", v="v", dst="attn", heads=heads, head_dim=dim, block=block)
    return AttentionSpec(
        kind="linear",
        window=None,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=dim,
        v_head_dim=dim,
        chunk=block,
    ), core


def lightning_note(count: int, label: str, packed: bool) -> str:
    """The dispatch explainer's note for lightning layers (models/minimax/modeling_minimax.py looks up
    no kernel for them) and whether packed documents stay apart."""
    note = (
        f"{count} linear-attention layers ({label}, lightning attention): the attention path does not "
        "apply to them. transformers offers no kernel for them (no hub or package lookup): "
        "MiniMaxLightningAttention.forward's torch block loop runs on every device (blocks of "
        "config.block_size tokens, the last one short, nothing padded)"
    )
    if packed:
        note += (
            "; this batch is packed, and the loop reads no document boundaries (attention_mask only "
            "zeroes padding tokens), so its documents share one decayed key-value state"
        )
    return note
