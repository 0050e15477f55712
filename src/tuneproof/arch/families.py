"""Readers that turn a transformers config object into a `ModelShape`, one per model family.

Each reader mirrors the family's modeling file in transformers 5.x (module names, which weights are
`nn.Linear`, where the router reads, how experts are stored). Family table at the bottom.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tuneproof.arch.shape import Attention, AttentionSpec, Join, LayerShape, Linear, ModelShape, Step


def _layer_kind(cfg: Any, i: int) -> tuple[str, int | None]:
    """Sliding or full for layer i. Families with `layer_types` use it; the others (mistral,
    mixtral, qwen3_moe) slide on every layer exactly when `sliding_window` is set."""
    window = getattr(cfg, "sliding_window", None) or None
    layer_types = getattr(cfg, "layer_types", None)
    if layer_types is not None:
        sliding = layer_types[i] == "sliding_attention" and window is not None
    else:
        sliding = window is not None
    return ("sliding", int(window)) if sliding and window is not None else ("full", None)


def _head_dim(cfg: Any) -> int:
    hd = getattr(cfg, "head_dim", None)
    return int(hd) if hd else cfg.hidden_size // cfg.num_attention_heads


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
    hidden: int,
    inter: int,
    num_experts: int,
    top_k: int,
    src: str,
    prefix: str,
    router: str,
    router_is_linear: bool = False,
) -> list[Step]:
    """Routed experts stored as fused 3-D parameters (gate_up (E, 2I, H), down (E, H, I)).

    The router's weights scale the experts' outputs, so the MoE output depends on both."""
    return [
        Linear(router, hidden, num_experts, src, "router", "router", adaptable=router_is_linear),
        Linear(
            f"{prefix}.gate_up_proj",
            hidden,
            2 * inter,
            src,
            "experts.act",
            "experts",
            tokens_per_token=top_k,
            adaptable=False,
            num_experts=num_experts,
        ),
        Linear(
            f"{prefix}.down_proj",
            inter,
            hidden,
            "experts.act",
            "experts.out",
            "experts",
            tokens_per_token=top_k,
            adaptable=False,
            num_experts=num_experts,
        ),
        Join("moe", ("experts.out", "router")),
    ]


def _spec(cfg: Any, i: int, head_dim: int | None = None, kv_heads: int | None = None) -> AttentionSpec:
    kind, window = _layer_kind(cfg, i)
    d = head_dim or _head_dim(cfg)
    return AttentionSpec(kind, window, cfg.num_attention_heads, kv_heads or cfg.num_key_value_heads, d, d)


def _shape(
    cfg: Any,
    model_type: str,
    layers: list[LayerShape],
    pre: tuple[Step, ...] = (),
    attn_refused: dict[str, str] | None = None,
) -> ModelShape:
    head = Linear(
        "lm_head", cfg.hidden_size, cfg.vocab_size, "model:final", "model:logits", "lm_head", adaptable=False
    )
    return ModelShape(
        model_type,
        cfg.hidden_size,
        cfg.vocab_size,
        bool(getattr(cfg, "tie_word_embeddings", False)),
        tuple(layers),
        head,
        pre,
        attn_refused or {},
    )


def read_dense(cfg: Any, model_type: str) -> ModelShape:
    """llama, mistral, qwen2, qwen3, gemma2, gemma3_text: attention + gated MLP per layer."""
    layers = []
    for i in range(cfg.num_hidden_layers):
        spec = _spec(cfg, i)
        steps = _attention_steps(cfg.hidden_size, spec)
        steps += _mlp_steps(cfg.hidden_size, cfg.intermediate_size, "mid", "ffn", "mlp")
        steps.append(Join("out", ("mid", "ffn")))
        # Gemma's post-feedforward norm saves the down_proj output; llama-style layers end in an add.
        layers.append(
            LayerShape(i, spec, tuple(steps), recompute_stops_early=not model_type.startswith("gemma"))
        )
    refused = {}
    if model_type == "gemma2" and getattr(cfg, "attn_logit_softcapping", None) is not None:
        # modeling_gemma2.py: _supports_sdpa = False ("sdpa does not support softcapping")
        refused["sdpa"] = "attention logit softcapping (Gemma2PreTrainedModel._supports_sdpa is False)"
    return _shape(cfg, model_type, layers, attn_refused=refused)


def read_moe(cfg: Any, model_type: str) -> ModelShape:
    """mixtral, qwen2_moe, qwen3_moe, gpt_oss: attention + routed experts (+ shared expert)."""
    num_experts = int(getattr(cfg, "num_experts", None) or cfg.num_local_experts)
    top_k = cfg.num_experts_per_tok
    moe_inter = getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size
    sparse_step = getattr(cfg, "decoder_sparse_step", 1) or 1
    mlp_only = set(getattr(cfg, "mlp_only_layers", None) or ())
    router = "mlp.router" if model_type == "gpt_oss" else "mlp.gate"
    layers = []
    for i in range(cfg.num_hidden_layers):
        spec = _spec(cfg, i)
        steps = _attention_steps(cfg.hidden_size, spec)
        dense = i in mlp_only or (i + 1) % sparse_step != 0
        if dense:
            steps += _mlp_steps(cfg.hidden_size, cfg.intermediate_size, "mid", "ffn", "mlp")
        else:
            steps += _moe_steps(cfg.hidden_size, moe_inter, num_experts, top_k, "mid", "mlp.experts", router)
            if model_type == "qwen2_moe":
                steps += _mlp_steps(
                    cfg.hidden_size,
                    cfg.shared_expert_intermediate_size,
                    "mid",
                    "shared",
                    "mlp.shared_expert",
                    "shared_expert",
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
        # MoE layers end in the routing-weight multiply, which saves the experts' output.
        layers.append(LayerShape(i, spec, tuple(steps), recompute_stops_early=dense))
    refused = {}
    if model_type == "gpt_oss":
        # modeling_gpt_oss.py: _supports_sdpa = False (attention sinks)
        refused["sdpa"] = "attention sinks (GptOssPreTrainedModel._supports_sdpa is False)"
    return _shape(cfg, model_type, layers, attn_refused=refused)


def read_gemma4(cfg: Any, model_type: str) -> ModelShape:
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
        spec = _spec(cfg, i, head_dim=lc.head_dim, kv_heads=lc.num_key_value_heads)
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
                hidden,
                cfg.moe_intermediate_size,
                cfg.num_experts,
                cfg.top_k_experts,
                "mid",
                "experts",
                "router.proj",
                router_is_linear=True,
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
        layers.append(LayerShape(i, spec, tuple(steps)))
    return _shape(cfg, model_type, layers, pre=pre)


Reader = Callable[[Any, str], ModelShape]

# model_type -> reader. A multimodal wrapper's text config carries its own model_type
# (gemma3 -> gemma3_text, gemma4 -> gemma4_text), which is what gets looked up here.
READERS: dict[str, Reader] = {
    "llama": read_dense,
    "mistral": read_dense,
    "qwen2": read_dense,
    "qwen3": read_dense,
    "gemma2": read_dense,
    "gemma3_text": read_dense,
    "mixtral": read_moe,
    "qwen2_moe": read_moe,
    "qwen3_moe": read_moe,
    "gpt_oss": read_moe,
    "gemma4_text": read_gemma4,
}

# Top-level model_types accepted from a config.json, mapped to the text model_type read above.
SUPPORTED_MODEL_TYPES: dict[str, str] = {
    **{k: k for k in READERS},
    "gemma3": "gemma3_text",
    "gemma4": "gemma4_text",
}
