"""One training step's memory, predicted from the config: states, activations per layer and backend,
and the walk to the peak (`tuneproof.memory.peak`), per rank under DDP or FSDP2."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tuneproof.arch import ResolvedModel
from tuneproof.arch.shape import Attention, BlockMix, BlockScores, LayerShape, Linear, ModelShape
from tuneproof.core.dtypes import BY_SHORT
from tuneproof.core.errors import TuneproofError
from tuneproof.hardware.card import CPU, Card
from tuneproof.memory.activations import (
    FP32,
    GATED,
    Geometry,
    Item,
    attention_half,
    layer_items,
    model_items,
)
from tuneproof.memory.norms import NormInventory, norm_inventory
from tuneproof.memory.peak import LayerCost, StepPeak, backward_temps, walk
from tuneproof.memory.states import States, state_bytes
from tuneproof.runs.step import Precision, Step, Training


@dataclass(kw_only=True, frozen=True, slots=True)
class StepMemory:
    """The predicted step on one rank: states, each layer's saved tensors, the model-level ones, the
    peak, the backend of every softmax layer and which have a materialised mask."""

    states: States
    layers: tuple[LayerCost, ...]
    model_level: tuple[Item, ...]
    peak: StepPeak
    backends: dict[int, str]
    masked: dict[int, bool]
    sharding: tuple[Item, ...] = field(default=())  # DDP buckets, FSDP's gathered layers
    why: dict[int, str] = field(default_factory=dict)  # why a layer's backend keeps T x T tensors

    @property
    def activations(self) -> int:
        return sum(layer.saved_bytes for layer in self.layers) + sum(i.nbytes for i in self.model_level)


def attention_backends(
    shape: ModelShape, run: Step, dtype: str, card: Card, dropout: float
) -> tuple[dict[int, str], dict[int, bool], dict[int, str]]:
    """The backend each softmax layer runs, whether its mask is materialised, and why a layer runs a
    backend that keeps the T x T probabilities, as dispatch decides."""
    from tuneproof.attention.dispatch import Context, predict

    ctx = Context(step=run, card=card, dtype=dtype, dropout=dropout)
    backends: dict[int, str] = {}
    masked: dict[int, bool] = {}
    why: dict[int, str] = {}
    for idxs in shape.attention_groups.values():
        p = predict(ctx, shape.layers[idxs[0]].attention)
        reason = "; ".join(f"{k}: {v}" for k, v in p.refused.items()) or (
            f"{run.attn} computes the scores itself" if run.attn == "eager" else p.mask_reason
        )
        for i in idxs:
            backends[i], masked[i], why[i] = p.backend, p.mask_materialised, reason
    return backends, masked, why


def _ffn_temps(layer: LayerShape, shape: ModelShape, g: Geometry) -> tuple[float, int]:
    """The feed-forward part's intermediate width (rows per token x the down projection's input), and
    what its backward adds beside: the largest merged weight's gradient of a PEFT target_parameters
    adapter, and the routed rows' gradient of a MoE (N x k x hidden)."""
    from tuneproof.arch.targets import adaptation

    lora = adaptation(shape, g.run.lora) if g.run.mode == "lora" else None

    widest, extra, routed = 0.0, 0, 0.0
    for s in layer.steps:
        if isinstance(s, Linear) and attention_half(s) == "ffn":
            if s.in_features != shape.hidden_size:  # the down projection: its input is the MLP's width
                widest = max(widest, s.tokens_per_token * s.in_features)
            if lora is not None and lora.place(layer.index, s).how == "parameter":
                extra = max(extra, s.num_experts * s.in_features * s.out_features * g.weight_bytes)
            if s.num_experts > 1:
                routed = max(routed, s.tokens_per_token)
    return widest, extra + round(g.tokens * routed) * shape.hidden_size * g.act_bytes


def _layer_gradients(shape: ModelShape, states: States) -> tuple[list[int], int]:
    """Each layer's share of the gradient bytes, and the rest (LM head, embedding): the gradients
    grow layer by layer through backward."""
    if states.adapters or not states.trainable:
        share = states.gradients // max(len(shape.layers), 1)
        return [share] * len(shape.layers), states.gradients - share * len(shape.layers)
    per_param = states.gradients / states.trainable
    layers = [round(_layer_parameters(layer) * per_param) for layer in shape.layers]
    return layers, states.gradients - sum(layers)


def _geometry(
    model: ResolvedModel,
    run: Step,
    precision: Precision,
    card: Card,
    fused_attention: bool,
) -> tuple[Geometry, dict[int, str]]:
    config = model.config if (model.source is not None or model._config is not None) else None
    dropout = float(getattr(config, "attention_dropout", 0.0) or 0.0)
    compute = precision.autocast or precision.dtype
    backends, masked, why = attention_backends(model.shape, run, compute, card, dropout)
    if fused_attention:  # the intended step: every softmax layer on a kernel that keeps O(T) statistics
        backends = dict.fromkeys(backends, "flash")
        masked = dict.fromkeys(masked, False)
    return Geometry(
        batch=run.batch, width=run.seq_len, act_bytes=precision.activation_bytes, run=run, backends=backends,
        masked=masked, input_grads=run.mode != "lora" or run.grad_ckpt, dropout=dropout,
        weight_bytes=BY_SHORT[precision.dtype].bytes,
        softcap=bool(getattr(config, "attn_logit_softcapping", None)),
        logit_softcap=bool(getattr(config, "final_logit_softcapping", None)),
        stream_bytes=BY_SHORT[precision.dtype].bytes, autocast=precision.autocast is not None,
    ), why  # fmt: skip


def _layer_costs(
    model: ResolvedModel, g: Geometry, inv: NormInventory, grads: list[int], copies: bool
) -> list[LayerCost]:
    shape = model.shape
    costs = []
    for i, layer in enumerate(shape.layers):
        items = layer_items(layer, shape, inv.layers[i], g, first=i == 0)
        if copies:
            gemms = _layer_parameters(layer)
            items.append(
                Item(
                    component="weights",
                    nbytes=gemms * g.act_bytes,
                    what="autocast's low-precision copies of the fp32 weights",
                )
            )
        widest, extra = _ffn_temps(layer, shape, g)
        kept = 3 if any(item.what.endswith(GATED) for item in items) else 2
        ffn, attn = backward_temps(
            layer.attention, g, g.backends.get(i, "math"), widest, shape.hidden_size, kept
        )
        flowing = g.tokens * shape.hidden_size * g.act_bytes  # the layer's input: what checkpointing keeps
        costs.append(
            LayerCost(
                index=i,
                saved=tuple(items),
                gradients=grads[i],
                ffn_temp=ffn + extra,
                attn_temp=attn,
                forward_temp=0,
                checkpoint_input=flowing,
            )
        )
    return costs


def _steps(shape: ModelShape, kind: type) -> bool:
    return any(isinstance(s, kind) for layer in shape.layers for s in layer.steps)


_LATER = "the memory ledger does not follow {} yet"
# What the activations here, sized once per layer module on the run's T tokens, do not describe, each
# with the module that reads it: looped or hierarchical decoders (`tuneproof.arch.schedule`: each run
# keeps its own tensors, or none under torch.no_grad), residual streams and block indexers
# (`tuneproof.arch.qwen4_exp`), stacked block states and score biases (`tuneproof.arch.inkling`),
# tokens a model prepends to every row (`tuneproof.arch.prefixed`). First match wins.
_UNSIZED: tuple[tuple[Callable[[ModelShape], bool], Callable[[ModelShape], str]], ...] = (
    (
        lambda m: bool(m.schedule),
        lambda m: (
            f"{m.model_type} runs its {m.num_layers} layers {len(m.runs)} times per forward "
            f"({len(m.no_grad_runs)} of the runs under torch.no_grad): the memory ledger sizes each layer's "
            "saved tensors once and does not follow a looped schedule yet"
        ),
    ),
    (
        lambda m: _steps(m, BlockScores),
        lambda m: (
            f"{m.model_type} keeps hyper-connection residual streams (several copies of the hidden "
            "state per token) and builds a QSA selection mask per layer: "
            + _LATER.format("residual streams or block indexers")
        ),
    ),
    (
        lambda m: _steps(m, BlockMix),
        lambda m: (
            f"{m.model_type} mixes each token's stacked block states with learned queries (block "
            "attention residuals) and keeps them through the stack: "
            + _LATER.format("block attention residuals")
        ),
    ),
    (
        lambda m: any(isinstance(s, Attention) and s.bias for layer in m.layers for s in layer.steps),
        lambda m: (
            f"{m.model_type} adds a computed bias (relative-position logits, sinks) to its attention "
            "scores, a (B, heads, T, T) tensor per layer kept for backward: " + _LATER.format("score biases")
        ),
    ),
    (
        lambda m: bool(m.prefix_tokens),
        lambda m: (
            f"{m.model_type} prepends {m.prefix_tokens} tokens of its own to every row and attends "
            "over them with its own matmuls: the memory ledger sizes the run's tokens only and does not "
            "follow in-model prefixes yet"
        ),
    ),
)


def check_sizable(shape: ModelShape) -> None:
    """Refuse a model whose layers the activations here do not describe (`_UNSIZED`), with why."""
    for applies, why in _UNSIZED:
        if applies(shape):
            raise TuneproofError(
                why(shape), "the FLOP ledger (tuneproof flops) counts it; measure this model's memory"
            )


def step_memory(
    model: ResolvedModel,
    run: Step,
    *,
    card: Card = CPU,
    norms: NormInventory | None = None,
    fused_attention: bool = False,
) -> StepMemory:
    """The step of `run` on `model` on one rank (in the step's own precision, stepped as its training
    says), on `card` (its capability picks the attention backends; the CPU's by default); with
    `fused_attention`, the intended step: every softmax layer on a fused kernel, no mask built."""
    precision, training = run.precision, run.training
    shape = model.shape
    check_sizable(shape)
    states = state_bytes(
        shape,
        run,
        precision.dtype,
        training.optimizer,
        training.step_on_device,
        precision.quant,
        precision.quant_experts,
    )
    g, why = _geometry(model, run, precision, card, fused_attention)
    inv = norms or norm_inventory(model)
    states, sharding, fixed_extra = _per_rank(states, shape, training)
    grads, rest = _layer_gradients(shape, states)
    embed = 0 if (shape.tie_word_embeddings or run.mode == "lora") else rest - _head_share(shape, states)
    costs = _layer_costs(model, g, inv, grads, precision.weight_copies)
    rotary = max((layer.attention.head_dim for layer in shape.layers if layer.attention.softmax), default=0)
    level = model_items(shape, inv.final, g, rotary)
    if precision.weight_copies:  # the LM head's weight, cast for its GEMM and kept for the input's gradient
        head = shape.head.in_features * shape.head.out_features * g.act_bytes
        level.append(
            Item(
                component="weights", nbytes=head, what="autocast's low-precision copy of the LM head's weight"
            )
        )
    kept_before = ("embedding", "mask") if run.grad_ckpt else ("embedding",)
    before = sum(i.nbytes for i in level if i.component in kept_before)
    after = sum(i.nbytes for i in level if i.component not in ("embedding", "mask"))
    peak = walk(
        fixed=states.weights + states.adapters + fixed_extra, optimizer_states=states.optimizer,
        gradients=states.gradients, head_gradients=rest - embed, last_gradients=embed, layers=costs,
        before=before, after=after, loss_temp=2 * g.tokens * shape.vocab_size * FP32,
        optimizer_temp=_optimizer_temp(states, training.optimizer_impl), checkpointing=run.grad_ckpt,
        accumulating=training.grad_accum > 1,
    )  # fmt: skip
    return StepMemory(
        states=states,
        layers=tuple(costs),
        model_level=tuple(level),
        peak=peak,
        backends=g.backends,
        masked=g.masked,
        sharding=sharding,
        why=why,
    )


def _head_share(shape: ModelShape, states: States) -> int:
    head = shape.head
    return (
        0 if head.tied else round(head.in_features * head.out_features * states.gradients / states.trainable)
    )


def _per_rank(states: States, shape: ModelShape, training: Training) -> tuple[States, tuple[Item, ...], int]:
    """The states one rank holds, what the data-parallel wrapper adds, and that addition's bytes.
    DDP (torch/nn/parallel/distributed.py): every weight and gradient, plus the reducer's flat buckets,
    a second copy of the gradients (gradient_as_bucket_view=False, the default). FSDP2 (fully_shard):
    1/world of weights, gradients and states, plus the current layer's and the prefetched next
    layer's weights gathered whole, and one layer's whole gradients before the reduce-scatter."""
    if training.parallel == "none":
        return states, (), 0
    if training.parallel == "ddp":
        buckets = Item(
            component="sharding",
            nbytes=states.gradients,
            what="DDP's gradient buckets (a copy of every gradient)",
        )
        return states, (buckets,), buckets.nbytes
    w = training.world_size
    layer = max((_layer_parameters(each) for each in shape.layers), default=0)
    per_param = states.weights / max(1, _all_parameters(shape))
    gathered = round(2 * layer * per_param)
    grads = round(layer * states.gradients / max(states.trainable, 1)) if states.trainable else 0
    sharded = replace(
        states, weights=states.weights // w, adapters=states.adapters // w, gradients=states.gradients // w,
        optimizer=states.optimizer // w,
    )  # fmt: skip
    items = (
        Item(
            component="sharding",
            nbytes=gathered,
            what="FSDP2: the current and the prefetched layer's weights, gathered whole",
        ),
        Item(
            component="sharding",
            nbytes=grads,
            what="FSDP2: one layer's whole gradients before the reduce-scatter",
        ),
    )
    return sharded, items, gathered + grads


def _layer_parameters(layer: LayerShape) -> int:
    return sum(s.in_features * s.out_features * s.num_experts for s in layer.steps if isinstance(s, Linear))


def _all_parameters(shape: ModelShape) -> int:
    embedding = 0 if shape.tie_word_embeddings else shape.vocab_size * shape.hidden_size
    return embedding + sum(
        lin.in_features * lin.out_features * lin.num_experts for lin in shape.linears if not lin.tied
    )


def _optimizer_temp(states: States, impl: str) -> int:
    """torch AdamW's temporaries while it steps: none fused, a copy of every exp_avg_sq for foreach
    (`torch._foreach_sqrt`), one parameter's for the single-tensor loop."""
    if impl == "fused" or not states.trainable:
        return 0
    if impl == "foreach":
        return states.gradients
    return states.gradients // max(states.tensors, 1)
