"""The effects that separate the performed ledger from the intended one, as an ordered table.

The intended state counts real tokens, the architecture's attention pairs and nothing the kernels
add, nor work that costs the same whatever the tokens (PEFT's expert merges). Folding the table
over it switches on one effect at a time; the FLOPs each step adds are that effect's excess line,
so the lines always sum to performed - intended. Order matters only for how a joint cost is split:
a FLOP that needs two effects is billed to the later one in the table (recompute comes first and is
counted on real tokens; the recompute of pad tokens appears when padding is switched on, so it is
billed to padding).

A new effect is one `Effect` row (its name, its reason, how it changes the walk) plus its test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tuneproof.arch.shape import Linear, ModelShape
from tuneproof.arch.targets import Adaptation, check
from tuneproof.attention.paths import PATHS, Performed, intended_for, path, performed_for
from tuneproof.flops.ledger import WalkState
from tuneproof.runs.step import Step


@dataclass(kw_only=True, frozen=True, slots=True)
class EffectContext:
    """What the walks and the effects read from the layers below, read once before the first walk: the
    model, the run, what its LoRA adapts (PEFT's resolution, checked), the softmax-attention groups, and
    per layer the pairs the architecture intends and what the chosen path computes for this batch."""

    shape: ModelShape
    run: Step
    lora: Adaptation
    groups: dict[str, list[int]]  # attention geometry label -> its layer indices
    intended: tuple[int, ...]  # per layer: attention pairs the architecture intends
    performed: dict[int, Performed]  # layer index -> what the path computes for this batch

    @classmethod
    def of(cls, shape: ModelShape, run: Step) -> EffectContext:
        rows, attn = run.rows, path(run.attn, unknown=True)
        intended = tuple(intended_for(rows, layer.attention) for layer in shape.layers)
        performed = {layer.index: performed_for(attn, rows, layer.attention) for layer in shape.layers}
        found = check(shape, run.lora, run.mode)
        return cls(
            shape=shape,
            run=run,
            lora=found if run.mode == "lora" else Adaptation(targets=run.lora),
            groups=shape.attention_groups,
            intended=intended,
            performed=performed,
        )


@dataclass(kw_only=True, frozen=True, slots=True)
class Effect:
    """One performed-only effect: `apply` turns the walk state before it into the state after it;
    `why` explains the line. `per_attention_group` splits the line per attention geometry."""

    name: str
    apply: Callable[[WalkState, EffectContext], WalkState]
    why: Callable[[EffectContext, tuple[int, ...]], str]
    per_attention_group: bool = False


def intended_state(ctx: EffectContext) -> WalkState:
    return WalkState(tokens=ctx.run.real_tokens, pairs=ctx.intended)


def _pad_why(ctx: EffectContext, layers: tuple[int, ...]) -> str:
    run = ctx.run
    return (
        f"{run.padded_tokens - run.real_tokens} of {run.padded_tokens} token slots are padding, "
        "every GEMM runs on them"
    )


def _delta_why(ctx: EffectContext, layers: tuple[int, ...]) -> str:
    run = ctx.run
    count = sum(
        1
        for layer in ctx.shape.layers
        for s in layer.steps
        if isinstance(s, Linear) and ctx.lora.place(layer.index, s).how == "parameter"
    )
    return (
        f"PEFT's target_parameters forms W + A@B (r={run.lora_rank} per expert) for {count} fused expert "
        "parameters on every forward and recompute: 2 products of 2*E*in*out*r FLOPs each (torch's "
        "parametrization check, then its use) and 2 in the backward (dA, dB), whatever the tokens"
    )


EFFECTS: tuple[Effect, ...] = (
    Effect(
        name="activation checkpointing recompute",
        apply=lambda s, c: replace(s, recompute=True),
        why=lambda c, _: (
            "each decoder layer's forward runs again in the backward (real tokens, intended pairs)"
        ),
    ),
    Effect(
        name="input gradients forced by checkpointing",
        apply=lambda s, c: replace(s, input_grads=True),
        why=lambda c, _: (
            "transformers' checkpointing calls enable_input_require_grads(): frozen first-layer "
            "GEMMs compute input gradients nobody needs"
        ),
    ),
    Effect(
        name="experts run densely: every token through every expert",
        apply=lambda s, c: replace(s, dense_experts=True),
        why=lambda c, _: (
            "this family's experts module runs a batched matmul of every token with every expert and "
            "weights the outputs by the router (zero for experts not chosen): num_experts / top_k times "
            "the routed work"
        ),
    ),
    Effect(
        name="padding: GEMMs on pad tokens",
        apply=lambda s, c: replace(s, tokens=c.run.padded_tokens, padded=True),
        why=_pad_why,
    ),
    Effect(
        name="{kind} attention ({count} layers, {label}): {attn}",
        apply=lambda s, c: replace(
            s, pairs=tuple(c.performed[layer.index].pairs for layer in c.shape.layers)
        ),
        why=lambda c, layers: c.performed[layers[0]].why,
        per_attention_group=True,
    ),
    Effect(
        name="sparse-attention indexer scores every key",
        apply=lambda s, c: replace(s, index_square=True),
        why=lambda c, _: (
            "the indexer's torch matmuls score each query against all keys of its row (the full square "
            "per index head) and mask afterwards; top-k selection needs only the causal triangle"
        ),
    ),
    Effect(
        name="fused attention backward recomputes QK^T",
        apply=lambda s, c: replace(s, fused=PATHS[c.run.attn].fused_backward),
        why=lambda c, _: f"{c.run.attn} kernels keep no score matrix, so the backward recomputes it",
    ),
    # after recompute: the deltas a recompute forms again are billed here, where they belong
    Effect(
        name="LoRA on fused experts: W + A@B formed every forward",
        apply=lambda s, c: replace(s, expert_deltas=True),
        why=_delta_why,
    ),
)
