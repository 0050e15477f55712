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

from tuneproof.arch.shape import Attention, AttentionSpec, Join, LayerShape, Linear, ModelShape, Op
from tuneproof.core.errors import TuneproofError

Reader = Callable[[Any, "Family"], ModelShape]


@dataclass(frozen=True, slots=True)
class Refusal:
    """transformers will not run `attn` for this family when `when(config)` holds; `reason` cites why."""

    attn: str
    reason: str
    when: Callable[[Any], bool] = lambda cfg: True


@dataclass(kw_only=True, frozen=True, slots=True)
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


def _attention_steps(hidden: int, spec: AttentionSpec, prefix: str = "self_attn") -> list[Op]:
    q_out = spec.num_heads * spec.head_dim
    kv_out = spec.num_kv_heads * spec.head_dim
    return [
        Linear(
            name=f"{prefix}.q_proj",
            in_features=hidden,
            out_features=q_out,
            src="in",
            dst="q",
            component="q_proj",
        ),
        Linear(
            name=f"{prefix}.k_proj",
            in_features=hidden,
            out_features=kv_out,
            src="in",
            dst="k",
            component="k_proj",
        ),
        Linear(
            name=f"{prefix}.v_proj",
            in_features=hidden,
            out_features=spec.num_kv_heads * spec.v_head_dim,
            src="in",
            dst="v",
            component="v_proj",
        ),
        Attention(q="q", k="k", v="v", dst="attn"),
        Linear(
            name=f"{prefix}.o_proj",
            in_features=spec.num_heads * spec.v_head_dim,
            out_features=hidden,
            src="attn",
            dst="o",
            component="o_proj",
        ),
        Join("mid", ("in", "o")),
    ]


def _mlp_steps(hidden: int, inter: int, src: str, dst: str, prefix: str, component: str = "mlp") -> list[Op]:
    """Gated MLP: down(act(gate(x)) * up(x))."""
    g, u, a = f"{dst}.gate", f"{dst}.up", f"{dst}.act"
    return [
        Linear(
            name=f"{prefix}.gate_proj",
            in_features=hidden,
            out_features=inter,
            src=src,
            dst=g,
            component=component,
        ),
        Linear(
            name=f"{prefix}.up_proj",
            in_features=hidden,
            out_features=inter,
            src=src,
            dst=u,
            component=component,
        ),
        Join(a, (g, u)),
        Linear(
            name=f"{prefix}.down_proj",
            in_features=inter,
            out_features=hidden,
            src=a,
            dst=dst,
            component=component,
        ),
    ]


def _moe_steps(
    hidden: int, inter: int, num_experts: int, top_k: int, src: str, prefix: str, fam: Family
) -> list[Op]:
    """Routed experts stored as fused 3-D parameters (gate_up (E, 2I, H), down (E, H, I)).

    The router's weights scale the experts' outputs, so the MoE output depends on both."""
    assert fam.router is not None
    expert = dict(tokens_per_token=top_k, adaptable=False, num_experts=num_experts)
    return [
        Linear(
            name=fam.router,
            in_features=hidden,
            out_features=num_experts,
            src=src,
            dst="router",
            component="router",
            adaptable=fam.router_is_linear,
        ),
        Linear(
            name=f"{prefix}.gate_up_proj",
            in_features=hidden,
            out_features=2 * inter,
            src=src,
            dst="experts.act",
            component="experts",
            **expert,  # type: ignore[arg-type]
        ),
        Linear(
            name=f"{prefix}.down_proj",
            in_features=inter,
            out_features=hidden,
            src="experts.act",
            dst="experts.out",
            component="experts",
            **expert,  # type: ignore[arg-type]
        ),
        Join("moe", ("experts.out", "router")),
    ]


def _shape(cfg: Any, fam: Family, layers: list[LayerShape], pre: tuple[Op, ...] = ()) -> ModelShape:
    head = Linear(
        name="lm_head",
        in_features=cfg.hidden_size,
        out_features=cfg.vocab_size,
        src="model:final",
        dst="model:logits",
        component="lm_head",
        adaptable=False,
    )
    return ModelShape(
        model_type=fam.model_type,
        hidden_size=cfg.hidden_size,
        vocab_size=cfg.vocab_size,
        tie_word_embeddings=bool(getattr(cfg, "tie_word_embeddings", False)),
        layers=tuple(layers),
        head=head,
        pre_steps=pre,
        attn_refused=fam.refused(cfg),
    )


def read_dense(cfg: Any, fam: Family) -> ModelShape:
    """Attention + gated MLP per layer (llama, mistral, qwen2, qwen3, gemma2, gemma3_text)."""
    layers = []
    for i in range(cfg.num_hidden_layers):
        spec = _spec(cfg, i, fam)
        steps = _attention_steps(cfg.hidden_size, spec)
        steps += _mlp_steps(cfg.hidden_size, cfg.intermediate_size, "mid", "ffn", "mlp")
        steps.append(Join("out", ("mid", "ffn")))
        layers.append(
            LayerShape(
                index=i, attention=spec, steps=tuple(steps), recompute_stops_early=not fam.post_ffn_norm
            )
        )
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
                        name="mlp.shared_expert_gate",
                        in_features=cfg.hidden_size,
                        out_features=1,
                        src="mid",
                        dst="shared.gate",
                        component="shared_expert",
                    ),
                    Join("ffn", ("moe", "shared", "shared.gate")),
                ]
            else:
                steps.append(Join("ffn", ("moe",)))
        steps.append(Join("out", ("mid", "ffn")))
        # an MoE layer ends in the routing-weight multiply, which saves the experts' output
        layers.append(
            LayerShape(
                index=i,
                attention=spec,
                steps=tuple(steps),
                recompute_stops_early=dense and not fam.post_ffn_norm,
            )
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
    pre: tuple[Op, ...] = ()
    if ple:
        pre = (
            Linear(name="per_layer_model_projection", in_features=hidden, out_features=n * ple,
                   src="model:embed", dst="model:ple.proj", component="per_layer_input"),
            Join("model:ple", ("model:ple.proj", "model:embed_per_layer")),
        )  # fmt: skip
    layers = []
    for i in range(n):
        lc = cfg.per_layer_config[i]
        spec = _spec(cfg, i, fam, head_dim=lc.head_dim, kv_heads=lc.num_key_value_heads)
        k_eq_v = bool(cfg.attention_k_eq_v) and spec.kind == "full"
        steps: list[Op] = [
            Linear(name="self_attn.q_proj", in_features=hidden, out_features=spec.num_heads * spec.head_dim,
                   src="in", dst="q", component="q_proj")
        ]  # fmt: skip
        if modes[i] == "reuse":
            ltype = cfg.layer_types[i]
            producer = max(j for j in range(first_shared) if cfg.layer_types[j] == ltype)
            k, v = f"L{producer}:k", f"L{producer}:v"
        else:
            k, v = "k", "v"
            kv_out = spec.num_kv_heads * spec.head_dim
            steps.append(Linear(name="self_attn.k_proj", in_features=hidden, out_features=kv_out, src="in",
                                dst="k", component="k_proj"))  # fmt: skip
            steps.append(
                Join("v", ("k",))
                if k_eq_v
                else Linear(name="self_attn.v_proj", in_features=hidden, out_features=kv_out, src="in",
                            dst="v", component="v_proj")
            )  # fmt: skip
        steps += [
            Attention(q="q", k=k, v=v, dst="attn"),
            Linear(name="self_attn.o_proj", in_features=spec.num_heads * spec.head_dim, out_features=hidden,
                   src="attn", dst="o", component="o_proj"),
            Join("mid", ("in", "o")),
        ]  # fmt: skip
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
                Linear(name="per_layer_input_gate", in_features=hidden, out_features=ple, src="ffn.out",
                       dst="ple.gate", component="per_layer_input"),
                Join("ple.mix", ("ple.gate", "model:ple")),
                Linear(name="per_layer_projection", in_features=ple, out_features=hidden, src="ple.mix",
                       dst="ple.out", component="per_layer_input"),
                Join("out", ("ffn.out", "ple.out")),
            ]  # fmt: skip
        else:
            steps.append(Join("out", merged))
        layers.append(
            LayerShape(
                index=i, attention=spec, steps=tuple(steps), recompute_stops_early=not fam.post_ffn_norm
            )
        )
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
        Family(model_type="llama", reader=read_dense, layer_types=False),
        Family(model_type="mistral", reader=read_dense, layer_types=False),
        Family(model_type="qwen2", reader=read_dense, layer_types=True),
        Family(model_type="qwen3", reader=read_dense, layer_types=True),
        Family(model_type="gemma2", reader=read_dense, layer_types=True, post_ffn_norm=True,
               refusals=(_SOFTCAP,)),
        Family(model_type="gemma3_text", reader=read_dense, layer_types=True, post_ffn_norm=True,
               wrappers=("gemma3",)),
        Family(model_type="mixtral", reader=read_moe, layer_types=False, moe=True, router="mlp.gate",
               size_fields=(*_MOE_SIZES, "intermediate_size", "num_local_experts")),
        Family(model_type="qwen2_moe", reader=read_moe, layer_types=True, moe=True, router="mlp.gate",
               shared_expert=True, size_fields=(*_MOE_SIZES, "moe_intermediate_size", "num_experts")),
        Family(model_type="qwen3_moe", reader=read_moe, layer_types=False, moe=True, router="mlp.gate",
               size_fields=(*_MOE_SIZES, "moe_intermediate_size", "num_experts")),
        Family(model_type="gpt_oss", reader=read_moe, layer_types=True, moe=True, router="mlp.router",
               refusals=(_SINKS,), size_fields=(*_MOE_SIZES, "intermediate_size", "num_local_experts")),
        Family(model_type="gemma4_text", reader=read_gemma4, layer_types=True, moe=True, router="router.proj",
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
    return Family(model_type=model_type, reader=read_by_construction, layer_types=True, size_fields=())


def family_of(model_type: str) -> Family:
    """The table's record for `model_type`, else one that reads the family by construction."""
    return FAMILIES.get(model_type) or constructed_family(model_type)
