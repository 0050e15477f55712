"""Decoders that prepend tokens of their own to every row inside their forward and attend over all of
them bidirectionally with their own matmuls (CPM-Ant).

What transformers computes (models/cpmant/modeling_cpmant.py):
- `CpmAntModel.forward` puts `prompt_length` prompt ids before each row's ids, so every decoder layer
  runs on T + prompt_length tokens; after the encoder it drops them (`hidden_states[:,
  self.prompt_length :, :]`), so the LM head runs on T;
- `CpmAntAttention.forward` scores with its own `torch.matmul`s (never the attention interface, so
  every --attn runs the same) over the full (T + P) x (T + P) square: `_prepare_attention_mask`
  builds the mask from `context`, which is all ones, so every query sees every key of its row
  (left padding and the segment-relative position bias, an embedding lookup, change no matmul);
- the layer: `self_att` (norm, q/k/v projections `project_q/k/v`, attention, `attention_out`,
  residual), then `ffn` (norm, `w_in.w_0` and `w_in.w_1` gated, `w_out`, residual).

Intended and performed alike count the prompt tokens in every layer (they are the model's own
computation) and (T + P)^2 pairs per row; intended reads T as the row's real tokens.
"""

from __future__ import annotations

from typing import Any

from tuneproof.arch.shape import AttentionSpec

# Decoder blocks whose attention is the model's own bidirectional matmuls over the prefix and the row,
# by class name -> (the attention child, its head-width attribute, the config field of the prefix).
PREFIXED_ATTENTION = {"CpmAntSelfAttentionBlock": ("self_attention", "dim_head", "prompt_length")}


def prefixed_spec(cfg: Any, block: Any) -> AttentionSpec:
    """The geometry of a `PREFIXED_ATTENTION` block of `cfg`'s model: one head width for q, k and v,
    no GQA, and the prefix its model prepends."""
    child, width, field = PREFIXED_ATTENTION[type(block).__name__]
    attention = getattr(block, child)
    heads, head_dim = int(attention.num_heads), int(getattr(attention, width))
    return AttentionSpec(
        kind="bidirectional", window=None, num_heads=heads, num_kv_heads=heads, head_dim=head_dim,
        v_head_dim=head_dim, prefix=int(getattr(cfg, field)),
    )  # fmt: skip


def bidirectional_pairs(real: list[int], prefix: int) -> int:
    """Pairs of rows whose real tokens are `real`, each with `prefix` tokens before it, every query
    seeing every key of its row: (n + prefix)^2 per row."""
    return sum((n + prefix) ** 2 for n in real)
