"""A small copy of a model's config that keeps what decides its attention masks: every layer kind
(sliding and full, chunked, ...), the windows, the head_dim of each kind and grouped-query attention,
with narrow widths, few heads, few experts and a small vocabulary. It builds in well under a second on
a CPU, so a live check (packed documents kept apart, `tuneproof explain --packed --live`) runs through
the masks transformers builds for the real config, not through a stand-in.

Widths are narrowed on the config dict the model was read from (`ResolvedModel.source`), or on the
config object's own dict, before transformers derives anything from them (Gemma 4's per-layer configs,
for one, are derived from the global head counts)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from tuneproof.arch import ResolvedModel

WINDOW = 48  # sliding windows and attention chunks in the copy (at most)
# config key -> the value the small copy takes (never more than the config's own)
NARROW = {
    "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32, "vocab_size": 512, "vocab_size_per_layer_input": 512,
    "hidden_size_per_layer_input": 16, "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4,
    "num_experts_per_tok": 2, "top_k_experts": 2, "n_shared_experts": 1, "num_kv_shared_layers": 0,
    # windows and chunks narrower than a short row, so that they bite inside it as they do at full width
    "sliding_window": WINDOW, "attention_chunk_size": WINDOW,
}  # fmt: skip
KEPT_WIDE = (
    "sliding_window",
    "attention_chunk_size",
    "vocab_size",
    "vocab_size_per_layer_input",
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "top_k_experts",
    "n_shared_experts",
)  # narrowed even with narrow=False
HEADS = 4  # query heads in the copy (at most)
KV_KEYS = ("num_key_value_heads", "num_global_key_value_heads")  # kept dividing the query heads
DERIVED = ("per_layer_config",)  # derived by the config class from the keys above: rebuilt, not copied


@dataclass(frozen=True, slots=True)
class SmallCopy:
    """The narrowed config dict (text model) and a line saying what was kept."""

    config: dict[str, Any]
    layers: int
    what: str


def small_copy(model: ResolvedModel, *, narrow: bool = True) -> SmallCopy:
    """The text config of `model` with the shortest prefix of its layers that holds every layer kind,
    head_dim and windows kept, heads, widths, experts and vocabulary narrowed (`NARROW`). With
    `narrow=False` only layers, experts and vocabulary shrink: for a family whose config ties its
    widths together (a Mamba head state that must match the intermediate size, say)."""
    source = model.source if model.source is not None else model.config.to_dict()
    text = copy.deepcopy(source.get("text_config") or source)
    if "model_type" not in text:
        text["model_type"] = model.shape.model_type
    for key in DERIVED:
        text.pop(key, None)
    layers = covering_prefix(model)
    if isinstance(text.get("layer_types"), list):
        text["layer_types"] = text["layer_types"][:layers]
    text["num_hidden_layers"] = layers
    heads = min(int(text.get("num_attention_heads") or HEADS), HEADS if narrow else 1 << 30)
    text["num_attention_heads"] = heads
    for key in KV_KEYS:
        if narrow and isinstance(text.get(key), int):
            text[key] = max(d for d in range(1, heads + 1) if heads % d == 0 and d <= text[key])
    for key, width in (NARROW if narrow else {k: NARROW[k] for k in KEPT_WIDE}).items():
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            text[key] = min(value, width)
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        ids = text.get(key)
        if isinstance(ids, int) and ids >= text.get("vocab_size", ids + 1):
            text[key] = 0
        elif isinstance(ids, list):
            text[key] = [i for i in ids if isinstance(i, int) and i < text.get("vocab_size", i + 1)] or None
    kept = model.shape.layers[:layers]
    windows = sorted({w for layer in kept if (w := layer.attention.window)})
    chunks = sorted(
        {c for layer in kept if layer.attention.kind == "chunked" and (c := layer.attention.chunk)}
    )
    kinds = sorted({layer.attention.kind for layer in kept})
    head_dims = sorted({layer.attention.head_dim for layer in kept if layer.attention.softmax})
    what = (
        f"a small copy of the config: its first {layers} layer(s), every kind it has ({', '.join(kinds)}), "
        f"{heads} query heads"
        + (f" of head_dim {', '.join(map(str, head_dims))}" if head_dims else "")
        + (f", windows {', '.join(map(str, windows))} narrowed to {WINDOW}" if windows else "")
        + (f", attention chunks {', '.join(map(str, chunks))} narrowed to {WINDOW}" if chunks else "")
        + (", narrow widths" if narrow else ", its own widths")
        + ", random weights"
    )
    return SmallCopy(text, layers, what)


def covering_prefix(model: ResolvedModel) -> int:
    """The fewest first layers that hold every kind of layer the model has: its attention kind and
    window, and the kinds of step it runs (a state-space core, experts, a dense MLP, ...)."""

    kind = layer_kind
    layers = model.shape.layers
    wanted = {kind(layer) for layer in layers}
    seen: set[tuple[object, ...]] = set()
    for i, layer in enumerate(layers):
        seen.add(kind(layer))
        if seen == wanted:
            return max(i + 1, min(2, len(layers)))
    return len(layers)


def layer_kind(layer: Any) -> tuple[object, ...]:
    """What makes two layers the same kind for the small copy: the attention kind and window, and the
    kinds of step the layer runs (a state-space core, experts, a dense MLP, ...)."""
    steps = frozenset(type(step).__name__ for step in layer.steps)
    return (layer.attention.kind, layer.attention.locality, steps)
