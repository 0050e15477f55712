"""DeepSeek Sparse Attention (DSA): a learned indexer picks, per query, the `index_topk` keys the
layer's softmax attention reads.

What transformers computes (models/deepseek_v32/modeling_deepseek_v32.py `DeepseekV32Indexer.forward`
and `DeepseekV32Attention.forward`; the copies in glm_moe_dsa, axk2, dots3_note and hy_v4 differ only
in their RoPE layout):
- the indexer's forward is decorated `@torch.no_grad()`: its own projections (wq_b on the query
  LoRA residual, wk and weights_proj on the layer input) run forward only, even in training, and a
  LoRA adapter on them gets no gradient. Which modules run so is read from their forward
  (`forward_without_grad`), not from a list of names;
- its scores: per index head, q . k over every (query, key) pair of the row (`torch.matmul` of
  [B, S, H, D] with [B, 1, D, T]), relu, then a weighted sum over the heads ([B, S, 1, H] @
  [B, S, H, T]); the causal mask is added afterwards and `topk` picks min(index_topk, T) keys;
- eager and sdpa fold the top-k into the attention mask (a dense mask: the main attention scores
  the full square); the `indices` go to the attention function only on other implementations
  (a flash-mla hub kernel), which these model classes do not enable yet.

Performed: the indexer's full T x T square per row (every path: it is torch code) and the main
attention's full square (eager and sdpa). Intended: the indexer on the causal triangle of each
document, and attention over min(index_topk, causal prefix) keys per query, the pairs a window of
index_topk keys has (`tuneproof.attention.paths.intended_for`).

GLM-MoE-DSA and HY-V4 layers marked "shared" in `indexer_types` hold no indexer and reuse the
previous layer's top-k: the same attention pairs, no index scores.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tuneproof.arch.shape import AttentionSpec, IndexScores, ModelShape

# the layer type transformers gives a DSA layer (configuration_deepseek_v32.py `layer_types`)
INDEXED_TYPE = "indexed_attention"


def forward_without_grad(module: Any) -> bool:
    """Whether `module`'s forward is decorated with `torch.no_grad()` (or inference_mode): torch's
    decorator wraps it in a function whose closure holds the context manager's bound `clone`."""
    import torch

    fn = getattr(type(module), "forward", None)
    while fn is not None:
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                owner = getattr(cell.cell_contents, "__self__", None)
            except ValueError:  # an empty cell
                continue
            if isinstance(owner, torch.no_grad | torch.inference_mode):
                return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def no_grad_prefixes(layer: Any) -> tuple[str, ...]:
    """Module paths (relative to the layer) whose forward runs without gradients; a GEMM under one of
    them is forward-only."""
    return tuple(name + "." for name, mod in layer.named_modules() if name and forward_without_grad(mod))


def _indexer(mod: Any) -> Any | None:
    """The attention module's child that runs the indexer: a no-grad child with index heads."""
    for child in mod.children():
        if forward_without_grad(child) and all(hasattr(child, a) for a in ("n_heads", "head_dim")):
            return child
    return None


def indexed_spec(cfg: Any, mod: Any, spec: AttentionSpec) -> tuple[AttentionSpec, IndexScores | None]:
    """An indexed layer's geometry (`spec` read as full attention, with the indexer's top-k) and its
    index scores (None on a layer that reuses another layer's top-k)."""
    indexer = _indexer(mod)
    topk = getattr(indexer, "index_topk", None) or int(cfg.index_topk)
    indexed = replace(spec, kind="indexed", window=None, topk=int(topk))
    if indexer is None:
        return indexed, None
    return indexed, IndexScores(
        q="in", k="in", dst="index", heads=int(indexer.n_heads), head_dim=int(indexer.head_dim)
    )


def index_pairs(lengths: list[int], square: bool) -> int:
    """(query, key) pairs the indexer scores over rows of `lengths` tokens: the full square (what
    transformers' torch path computes) or the causal triangle (what top-k selection needs)."""
    return sum(n * n if square else n * (n + 1) // 2 for n in lengths)


def index_score_flops(step: IndexScores, pairs: int) -> float:
    """Forward FLOPs of the indexer's scores over `pairs` (query, key) pairs, as
    `DeepseekV32Indexer.forward` computes them: q . k per index head (2 x heads x head_dim per pair)
    and the weighted sum over heads (2 x heads per pair). relu, the mask and topk are no matmuls.
    Forward only: the indexer runs under torch.no_grad."""
    return 2.0 * pairs * step.heads * (step.head_dim + 1)


_NOTE = (
    "{count} indexed-attention layers ({label}; {who}): the indexer is torch matmuls under no_grad on "
    "every path (each query against all keys of its row, then top-k). For eager and sdpa transformers "
    "folds the top-k into the attention mask, so attention still computes the full square; only an "
    "attention function that takes `indices=` (the flash-mla hub kernel, kernels-community/flash-mla) "
    "would skip the unpicked keys, and this model class does not enable it yet (_supports_flash_attn is "
    "False)"
)


def indexed_attention_notes(shape: ModelShape) -> list[str]:
    """What runs for each indexed-attention geometry (the dispatch explainer's note)."""
    notes = []
    for label, idxs in shape.attention_groups.items():
        if shape.layers[idxs[0]].attention.kind != "indexed":
            continue
        scored = sum(1 for i in idxs if any(isinstance(s, IndexScores) for s in shape.layers[i].steps))
        notes.append(_NOTE.format(count=len(idxs), label=label, who=_who_indexes(scored, len(idxs))))
    return notes


def _who_indexes(scored: int, count: int) -> str:
    """Which of the layers run their own indexer (GLM-MoE-DSA and HY-V4 layers marked "shared" in
    `indexer_types` reuse an earlier top-k)."""
    if scored == count:
        return "each runs its own indexer"
    if scored == 0:
        return "each reuses an earlier layer's top-k"
    return f"{scored} run their own indexer, the other {count - scored} reuse an earlier layer's top-k"
