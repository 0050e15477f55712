"""Model families: one table of records (`FAMILIES`) and the readers that turn a transformers config
into a `ModelShape`.

Each record states what differs between families, as data: which reader builds the layers, whether
the MLP holds routed experts and where the router sits, whether a shared expert runs beside them,
how layers are typed sliding or full, whether a norm after the feed-forward block keeps activation
checkpointing's recompute from stopping early, and which attention implementations transformers
refuses. The readers mirror the modeling files of transformers 5.x (module names, which weights are
`nn.Linear`, how experts are stored); they read the record, never `model_type`.

A new family is one record plus a tiny config in `tests/tiny_models.py` (a test checks both exist).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuneproof.arch.shape import Attention, AttentionSpec, Join, LayerShape, Linear, ModelShape, Step
from tuneproof.core.errors import TuneproofError

Reader = Callable[[Any, "Family"], ModelShape]


@dataclass(frozen=True, slots=True)
class Refusal:
    """transformers will not run `attn` for this family when `when(config)` holds; `reason` cites why."""

    attn: str
    reason: str
    when: Callable[[Any], bool] = lambda cfg: True


@dataclass(frozen=True, slots=True)
class Family:
    """What one model family looks like to the FLOP ledger and the model builder.

    - `layer_types`: layers are typed by `config.layer_types` ("sliding_attention" / "full_attention");
      False: every layer slides exactly when `sliding_window` is set (mistral, mixtral, qwen3_moe).
    - `moe`: routed experts (fused 3-D parameters) in some or all layers; `router` is the router's
      module path relative to the layer, `router_is_linear` whether it is an `nn.Linear` (LoRA can wrap it).
    - `shared_expert`: a dense shared expert with a sigmoid gate runs beside the routed experts (qwen2_moe).
    - `post_ffn_norm`: a norm after the feed-forward block saves its output, so non-reentrant
      checkpointing re-runs a layer's last GEMM in the recompute (see `LayerShape.recompute_stops_early`).
    - `size_fields`: config fields that fix the model's size; a config missing one takes transformers'
      default, which is named in a note (all missing: refused).
    - `wrappers`: top-level model_types whose `text_config` is this family (multimodal wrappers).
    """

    model_type: str
    reader: Reader
    layer_types: bool
    moe: bool = False
    router: str | None = None
    router_is_linear: bool = False
    shared_expert: bool = False
    post_ffn_norm: bool = False
    refusals: tuple[Refusal, ...] = ()
    size_fields: tuple[str, ...] = (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "vocab_size",
    )
    wrappers: tuple[str, ...] = ()

    def refused(self, cfg: Any) -> dict[str, str]:
        """Attention implementations transformers refuses for this config, with the reason."""
        return {r.attn: r.reason for r in self.refusals if r.when(cfg)}


# ---- readers --------------------------------------------------------------------------------------


def _layer_kind(cfg: Any, i: int, fam: Family) -> tuple[str, int | None]:
    """Sliding (with its window) or full for layer i."""
    window = getattr(cfg, "sliding_window", None) or None
    if fam.layer_types and getattr(cfg, "layer_types", None) is not None:
        sliding = cfg.layer_types[i] == "sliding_attention"
    else:
        sliding = True
    return ("sliding", int(window)) if sliding and window is not None else ("full", None)


def _head_dim(cfg: Any) -> int:
    hd = getattr(cfg, "head_dim", None)
    return int(hd) if hd else cfg.hidden_size // cfg.num_attention_heads


def _spec(
    cfg: Any, i: int, fam: Family, head_dim: int | None = None, kv_heads: int | None = None
) -> AttentionSpec:
    kind, window = _layer_kind(cfg, i, fam)
    d = head_dim or _head_dim(cfg)
    return AttentionSpec(
        kind=kind,
        window=window,
        num_heads=cfg.num_attention_heads,
        num_kv_heads=kv_heads or cfg.num_key_value_heads,
        head_dim=d,
        v_head_dim=d,
    )


def _attention_steps(hidden: int, spec: AttentionSpec, prefix: str = "self_attn") -> list[Step]:
    q_out = spec.num_heads * spec.head_dim
    kv_out = spec.num_kv_heads * spec.head_dim
    return [
        Linear(f"{prefix}.q_proj", hidden, q_out, "in", "q", "q_proj"),
        Linear(f"{prefix}.k_proj", hidden, kv_out, "in", "k", "k_proj"),
        Linear(f"{prefix}.v_proj", hidden, spec.num_kv_heads * spec.v_head_dim, "in", "v", "v_proj"),
        Attention("q", "k", "v", "attn"),
        Linear(f"{prefix}.o_proj", spec.num_heads * spec.v_head_dim, hidden, "attn", "o", "o_proj"),
        Join("mid", ("in", "o")),
    ]


def _mlp_steps(
    hidden: int, inter: int, src: str, dst: str, prefix: str, component: str = "mlp"
) -> list[Step]:
    """Gated MLP: down(act(gate(x)) * up(x))."""
    g, u, a = f"{dst}.gate", f"{dst}.up", f"{dst}.act"
    return [
        Linear(f"{prefix}.gate_proj", hidden, inter, src, g, component),
        Linear(f"{prefix}.up_proj", hidden, inter, src, u, component),
        Join(a, (g, u)),
        Linear(f"{prefix}.down_proj", inter, hidden, a, dst, component),
    ]


def _moe_steps(
    hidden: int, inter: int, num_experts: int, top_k: int, src: str, prefix: str, fam: Family
) -> list[Step]:
    """Routed experts stored as fused 3-D parameters (gate_up (E, 2I, H), down (E, H, I)).

    The router's weights scale the experts' outputs, so the MoE output depends on both."""
    assert fam.router is not None
    expert = dict(tokens_per_token=top_k, adaptable=False, num_experts=num_experts)
    return [
        Linear(fam.router, hidden, num_experts, src, "router", "router", adaptable=fam.router_is_linear),
        Linear(f"{prefix}.gate_up_proj", hidden, 2 * inter, src, "experts.act", "experts", **expert),  # type: ignore[arg-type]
        Linear(f"{prefix}.down_proj", inter, hidden, "experts.act", "experts.out", "experts", **expert),  # type: ignore[arg-type]
        Join("moe", ("experts.out", "router")),
    ]


def _shape(cfg: Any, fam: Family, layers: list[LayerShape], pre: tuple[Step, ...] = ()) -> ModelShape:
    head = Linear(
        "lm_head", cfg.hidden_size, cfg.vocab_size, "model:final", "model:logits", "lm_head", adaptable=False
    )
    return ModelShape(
        fam.model_type,
        cfg.hidden_size,
        cfg.vocab_size,
        bool(getattr(cfg, "tie_word_embeddings", False)),
        tuple(layers),
        head,
        pre,
        fam.refused(cfg),
    )


def read_dense(cfg: Any, fam: Family) -> ModelShape:
    """Attention + gated MLP per layer (llama, mistral, qwen2, qwen3, gemma2, gemma3_text)."""
    layers = []
    for i in range(cfg.num_hidden_layers):
        spec = _spec(cfg, i, fam)
        steps = _attention_steps(cfg.hidden_size, spec)
        steps += _mlp_steps(cfg.hidden_size, cfg.intermediate_size, "mid", "ffn", "mlp")
        steps.append(Join("out", ("mid", "ffn")))
        layers.append(LayerShape(i, spec, tuple(steps), recompute_stops_early=not fam.post_ffn_norm))
    return _shape(cfg, fam, layers)


def read_moe(cfg: Any, fam: Family) -> ModelShape:
    """Attention + routed experts (+ a shared expert) per layer (mixtral, qwen2_moe, qwen3_moe, gpt_oss);
    `mlp_only_layers` and `decoder_sparse_step` make some layers dense."""
    num_experts = int(getattr(cfg, "num_experts", None) or cfg.num_local_experts)
    top_k = cfg.num_experts_per_tok
    moe_inter = getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size
    sparse_step = getattr(cfg, "decoder_sparse_step", 1) or 1
    mlp_only = set(getattr(cfg, "mlp_only_layers", None) or ())
    layers = []
    for i in range(cfg.num_hidden_layers):
        spec = _spec(cfg, i, fam)
        steps = _attention_steps(cfg.hidden_size, spec)
        dense = i in mlp_only or (i + 1) % sparse_step != 0
        if dense:
            steps += _mlp_steps(cfg.hidden_size, cfg.intermediate_size, "mid", "ffn", "mlp")
        else:
            steps += _moe_steps(cfg.hidden_size, moe_inter, num_experts, top_k, "mid", "mlp.experts", fam)
            if fam.shared_expert:
                shared = cfg.shared_expert_intermediate_size
                steps += _mlp_steps(
                    cfg.hidden_size, shared, "mid", "shared", "mlp.shared_expert", "shared_expert"
                )
                steps += [
                    Linear(
                        "mlp.shared_expert_gate", cfg.hidden_size, 1, "mid", "shared.gate", "shared_expert"
                    ),
                    Join("ffn", ("moe", "shared", "shared.gate")),
                ]
            else:
                steps.append(Join("ffn", ("moe",)))
        steps.append(Join("out", ("mid", "ffn")))
        # an MoE layer ends in the routing-weight multiply, which saves the experts' output
        layers.append(
            LayerShape(i, spec, tuple(steps), recompute_stops_early=dense and not fam.post_ffn_norm)
        )
    return _shape(cfg, fam, layers)


def read_gemma4(cfg: Any, fam: Family) -> ModelShape:
    """Gemma 4 text: per-layer head_dim/kv heads (global layers), attention_k_eq_v, KV sharing,
    dense MLP plus an optional MoE block (router is an `nn.Linear`), per-layer inputs (PLE)."""
    n = cfg.num_hidden_layers
    hidden = cfg.hidden_size
    modes = list(cfg.kv_sharing_modes)
    first_shared = n - cfg.num_kv_shared_layers
    ple = cfg.hidden_size_per_layer_input or 0
    pre: tuple[Step, ...] = ()
    if ple:
        pre = (
            Linear(
                "per_layer_model_projection",
                hidden,
                n * ple,
                "model:embed",
                "model:ple.proj",
                "per_layer_input",
            ),
            Join("model:ple", ("model:ple.proj", "model:embed_per_layer")),
        )
    layers = []
    for i in range(n):
        lc = cfg.per_layer_config[i]
        spec = _spec(cfg, i, fam, head_dim=lc.head_dim, kv_heads=lc.num_key_value_heads)
        k_eq_v = bool(cfg.attention_k_eq_v) and spec.kind == "full"
        steps: list[Step] = [
            Linear("self_attn.q_proj", hidden, spec.num_heads * spec.head_dim, "in", "q", "q_proj")
        ]
        if modes[i] == "reuse":
            ltype = cfg.layer_types[i]
            producer = max(j for j in range(first_shared) if cfg.layer_types[j] == ltype)
            k, v = f"L{producer}:k", f"L{producer}:v"
        else:
            k, v = "k", "v"
            kv_out = spec.num_kv_heads * spec.head_dim
            steps.append(Linear("self_attn.k_proj", hidden, kv_out, "in", "k", "k_proj"))
            steps.append(
                Join("v", ("k",))
                if k_eq_v
                else Linear("self_attn.v_proj", hidden, kv_out, "in", "v", "v_proj")
            )
        steps += [
            Attention("q", k, v, "attn"),
            Linear("self_attn.o_proj", spec.num_heads * spec.head_dim, hidden, "attn", "o", "o_proj"),
            Join("mid", ("in", "o")),
        ]
        wide = 2 if (cfg.use_double_wide_mlp and modes[i] == "reuse") else 1
        steps += _mlp_steps(hidden, cfg.intermediate_size * wide, "mid", "ffn", "mlp")
        merged: tuple[str, ...] = ("mid", "ffn")
        if cfg.enable_moe_block:
            steps += _moe_steps(
                hidden, cfg.moe_intermediate_size, cfg.num_experts, cfg.top_k_experts, "mid", "experts", fam
            )
            merged = ("mid", "ffn", "moe")
        if ple:
            steps += [
                Join("ffn.out", merged),
                Linear("per_layer_input_gate", hidden, ple, "ffn.out", "ple.gate", "per_layer_input"),
                Join("ple.mix", ("ple.gate", "model:ple")),
                Linear("per_layer_projection", ple, hidden, "ple.mix", "ple.out", "per_layer_input"),
                Join("out", ("ffn.out", "ple.out")),
            ]
        else:
            steps.append(Join("out", merged))
        layers.append(LayerShape(i, spec, tuple(steps), recompute_stops_early=not fam.post_ffn_norm))
    return _shape(cfg, fam, layers, pre=pre)


# ---- the table ----------------------------------------------------------------------------------

_MOE_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "num_experts_per_tok")
_SOFTCAP = Refusal(
    "sdpa",
    "attention logit softcapping (modeling_gemma2.py: Gemma2PreTrainedModel._supports_sdpa is False)",
    lambda cfg: getattr(cfg, "attn_logit_softcapping", None) is not None,
)
_SINKS = Refusal(
    "sdpa", "attention sinks (modeling_gpt_oss.py: GptOssPreTrainedModel._supports_sdpa is False)"
)

# Keyed by the text model_type. Gemma's norm after the feed-forward block (post_feedforward_layernorm)
# is what `post_ffn_norm` records; llama-style layers end in a residual add.
FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        Family("llama", read_dense, layer_types=False),
        Family("mistral", read_dense, layer_types=False),
        Family("qwen2", read_dense, layer_types=True),
        Family("qwen3", read_dense, layer_types=True),
        Family("gemma2", read_dense, layer_types=True, post_ffn_norm=True, refusals=(_SOFTCAP,)),
        Family("gemma3_text", read_dense, layer_types=True, post_ffn_norm=True, wrappers=("gemma3",)),
        Family("mixtral", read_moe, layer_types=False, moe=True, router="mlp.gate",
               size_fields=(*_MOE_SIZES, "intermediate_size", "num_local_experts")),
        Family("qwen2_moe", read_moe, layer_types=True, moe=True, router="mlp.gate", shared_expert=True,
               size_fields=(*_MOE_SIZES, "moe_intermediate_size", "num_experts")),
        Family("qwen3_moe", read_moe, layer_types=False, moe=True, router="mlp.gate",
               size_fields=(*_MOE_SIZES, "moe_intermediate_size", "num_experts")),
        Family("gpt_oss", read_moe, layer_types=True, moe=True, router="mlp.router", refusals=(_SINKS,),
               size_fields=(*_MOE_SIZES, "intermediate_size", "num_local_experts")),
        Family("gemma4_text", read_gemma4, layer_types=True, moe=True, router="router.proj",
               router_is_linear=True, post_ffn_norm=True, wrappers=("gemma4",)),
    )
}  # fmt: skip

# Top-level model_types accepted from a config.json, mapped to the text model_type they carry.
SUPPORTED_MODEL_TYPES: dict[str, str] = {
    **{t: t for t in FAMILIES},
    **{w: f.model_type for f in FAMILIES.values() for w in f.wrappers},
}


def read_by_construction(cfg: Any, fam: Family) -> ModelShape:
    """Any other decoder: its shape read from the module tree transformers builds on the meta device
    (`tuneproof.arch.construct`)."""
    from tuneproof.arch.construct import read_constructed
    from tuneproof.arch.coverage import refusal

    why = refusal(fam.model_type)
    if why is None and getattr(cfg, "is_encoder_decoder", False):
        why = f"{fam.model_type} is an encoder-decoder model: out of scope for a decoder FLOP ledger"
    if why is not None:
        raise TuneproofError(why, "tuneproof costs decoder-only text models; docs/families.md lists them")
    return read_constructed(cfg, fam.model_type)[0]


def constructed_family(model_type: str) -> Family:
    """The record of a family without one in `FAMILIES`: everything is read from its module tree;
    attention refusals come from the model class's `_supports_*` flags."""
    return Family(model_type, read_by_construction, layer_types=True, size_fields=())


def family_of(model_type: str) -> Family:
    """The table's record for `model_type`, else one that reads the family by construction."""
    return FAMILIES.get(model_type) or constructed_family(model_type)
