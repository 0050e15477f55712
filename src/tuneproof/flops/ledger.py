"""Intended vs performed FLOPs of one training (or forward) step, per layer, component and pass.

Convention (both ledgers):
- Matmul FLOPs only: 2*m*n*k per GEMM (a multiply-add is 2 FLOPs). Elementwise ops, norms,
  softmax, rotary embeddings, the router's top-k, the loss and embedding lookups are excluded.
- Passes: forward; recompute (activation checkpointing re-runs each decoder layer's forward in the
  backward; LM head and model-level projections are not re-run); backward = the GEMMs autograd
  really runs: an input-gradient GEMM only where the input needs a gradient, a weight-gradient
  GEMM only for trainable weights (under LoRA the frozen base gets none, the adapters' own four
  GEMMs are counted). Attention backward counts dS=dO.V^T, dV, dQ, dK (2x the forward).
- Fused attention kernels (sdpa, flash, flex) recompute QK^T inside their backward; the performed
  ledger counts it as its own row, the intended ledger does not.
- MoE experts: each token runs top_k experts (exact whatever the routing).
- LoRA on fused experts (PEFT `target_parameters`, `Step.lora_target_parameters`): PEFT's
  ParamWrapper does not add an adapter path beside the experts; it re-parametrises the 3-D weight
  W[E, in, out] as W + s*A@B with A[E, in, r], B[E, r, out] (rank r per expert) on every forward, and
  the experts' GEMMs run on that merged weight. So the merged weight needs a gradient: the expert
  GEMMs run their weight-gradient GEMMs as in full fine-tuning (counted in both ledgers, in the
  "experts" rows: it is token work, and dA, dB are read from it). Forming A@B (2*E*in*out*r per
  product) is token-independent work and counted in the performed ledger only, as the "lora.experts"
  rows (effect "LoRA on fused experts"): per forward and per recompute 2 products (torch's
  register_parametrization evaluates the parametrization once to check its shape, then the cached
  forward evaluates it again), and in the backward 2 more (dA and dB). That is PEFT 0.21's path for
  one active adapter on a bf16/fp16/fp32 weight (`_LoraFactorsProxy`, one baddbmm).

Ledgers:
- intended: real tokens only, causal and window pairs exact, no recompute. This is the MFU
  numerator ("model FLOPs").
- performed: what the chosen path computes: all B*T token slots, the path's attention pairs
  (see `tuneproof.attention.paths`), recompute and fused-kernel recompute included.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from tuneproof.arch.shape import (
    Attention,
    BlockMix,
    BlockScores,
    Core,
    IndexScores,
    Join,
    LayerShape,
    Linear,
    ModelShape,
    Op,
)
from tuneproof.arch.targets import Adaptation
from tuneproof.core.errors import TuneproofError
from tuneproof.runs.step import Step

PASSES = ("forward", "recompute", "backward")
# components whose rows cost the same whatever the tokens: a micro-batch pays them once, not per row
TOKEN_FREE_COMPONENTS = ("lora.experts",)


@dataclass(kw_only=True, frozen=True, slots=True)
class Row:
    layer: int | None  # None for model-level GEMMs (LM head, per-layer input projection)
    component: str
    pass_: str
    flops: float


@dataclass(slots=True)
class Ledger:
    """FLOP rows of one step; the sums are views."""

    rows: list[Row] = field(default_factory=list)

    def add(self, layer: int | None, component: str, pass_: str, flops: float) -> None:
        if flops:
            self.rows.append(Row(layer=layer, component=component, pass_=pass_, flops=float(flops)))

    @property
    def total(self) -> float:
        return sum(r.flops for r in self.rows)

    def by(self, key: str) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for r in self.rows:
            out[str(getattr(r, key))] += r.flops
        return dict(out)

    def by_layer(self) -> dict[str, dict[str, float]]:
        """{layer index or "model": {component: FLOPs over all passes}}."""
        out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for r in self.rows:
            out["model" if r.layer is None else str(r.layer)][r.component] += r.flops
        return {k: dict(v) for k, v in out.items()}

    def where(self, *, component_prefix: str = "", layers: set[int] | None = None) -> float:
        return sum(
            r.flops
            for r in self.rows
            if r.component.startswith(component_prefix) and (layers is None or r.layer in layers)
        )


@dataclass(kw_only=True, frozen=True, slots=True)
class WalkState:
    """What one walk of the layer programs counts. The intended ledger is one state, the performed
    ledger another; `tuneproof.flops.effects` moves from the first to the second one named effect
    at a time.

    - `tokens`: token slots every GEMM runs on (real tokens, or all B*T slots);
    - `pairs`: attention pairs per layer, summed over the batch;
    - `recompute`: activation checkpointing re-runs each decoder layer's forward in the backward;
    - `input_grads`: the input embeddings' output needs a gradient (transformers' checkpointing calls
      enable_input_require_grads(), even when the embeddings are frozen);
    - `fused`: fused attention kernels recompute QK^T in their backward;
    - `padded`: linear-attention layers run on the padded rows (else on each real document);
    - `dense_experts`: experts stored `dense` run every token through every expert (Llama 4);
    - `expert_deltas`: LoRA on fused experts forms each adapted expert weight W + A@B (see above);
    - `index_square`: a sparse-attention indexer scores every key of its row, not the causal triangle.
    """

    tokens: int
    pairs: tuple[int, ...]
    recompute: bool = False
    input_grads: bool = False
    fused: bool = False
    expert_deltas: bool = False
    padded: bool = False
    dense_experts: bool = False
    index_square: bool = False


class _Walker:
    """Evaluates the layer programs: requires-grad flags per node, FLOPs per GEMM and pass."""

    def __init__(self, shape: ModelShape, run: Step, state: WalkState, lora: Adaptation) -> None:
        self.shape, self.run = shape, run
        self.tokens, self.pairs, self.fused = state.tokens, state.pairs, state.fused
        # the tokens a model prepends to each row run through every layer, not the model-level GEMMs
        self.prefix = run.batch * shape.prefix_tokens
        self.padded, self.dense_experts = state.padded, state.dense_experts
        self.expert_deltas = state.expert_deltas
        self.index_square = state.index_square
        self.recompute = state.recompute and run.grad_ckpt
        self.training = run.mode != "forward"
        full = run.mode == "full"
        self.lora = lora  # what the LoRA adapts: each GEMM's place
        embed_saved = lora.embedding_saved
        self.rg: dict[str, bool] = {
            "model:embed": full or embed_saved or (state.input_grads and run.grad_ckpt and self.training),
            "model:embed_per_layer": full,
        }
        self.ledger = Ledger()

    def node(self, layer: int | None, name: str) -> str:
        if layer is None or (name.startswith(("model:", "L")) and ":" in name):
            return name
        return f"L{layer}:{name}"

    def linear(self, layer: int | None, lin: Linear, passes: tuple[str, ...], last: bool = False) -> None:
        """`last`: the layer's final GEMM under an early-stopping recompute (see LayerShape)."""
        rows = self.tokens + (self.prefix if layer is not None else 0)
        n = rows * (lin.num_experts if self.dense_experts and lin.dense else lin.tokens_per_token)
        gemm = 2.0 * n * lin.in_features * lin.out_features
        if lin.no_grad:  # forward only: no backward, its output needs no gradient (nor its adapter)
            return self.forward_only(layer, lin, passes, gemm)
        src_rg = self.rg[self.node(layer, lin.src)]
        place = self.lora.place(layer, lin)
        in_place = place.how == "parameter"
        # a merged weight W + A@B gets its gradient; so does a module saved whole (modules_to_save)
        trainable = self.run.mode == "full" or in_place or place.how == "whole"
        adapted = place.how == "module"
        r = place.rank
        a_gemm = 2.0 * n * lin.in_features * r
        b_gemm = 2.0 * n * r * lin.out_features
        # one A@B product over all E experts, whatever the tokens (performed only)
        delta = 2.0 * lin.num_experts * lin.in_features * r * lin.out_features
        delta = delta if in_place and self.expert_deltas else 0.0
        saves = src_rg or trainable  # the base GEMM saves an input for backward
        for p in passes:
            skip = last and p == "recompute"
            self.ledger.add(layer, lin.component, p, 0.0 if skip and saves and not adapted else gemm)
            if adapted:
                self.ledger.add(layer, "lora", p, a_gemm + (0.0 if skip else b_gemm))
            self.ledger.add(layer, "lora.experts", p, 2 * delta)  # the parametrization check, then its use
        out_rg = src_rg or trainable or adapted
        self.rg[self.node(layer, lin.dst)] = out_rg
        if self.training and out_rg:
            self.ledger.add(layer, lin.component, "backward", gemm * (int(src_rg) + int(trainable)))
            if adapted:  # wgrad A and B, dgrad B always; dgrad A only when the input needs it
                self.ledger.add(layer, "lora", "backward", a_gemm * (1 + int(src_rg)) + 2 * b_gemm)
            self.ledger.add(layer, "lora.experts", "backward", 2 * delta)  # dA and dB

    def forward_only(self, layer: int | None, lin: Linear, passes: tuple[str, ...], gemm: float) -> None:
        """A GEMM under torch.no_grad (a sparse-attention indexer's projection), with its LoRA
        adapter's two forward GEMMs when adapted."""
        n = (self.tokens + (self.prefix if layer is not None else 0)) * lin.tokens_per_token
        place = self.lora.place(layer, lin)
        lora = 2.0 * n * place.rank * (lin.in_features + lin.out_features) if place.how == "module" else 0
        for p in passes:
            self.ledger.add(layer, lin.component, p, gemm)
            self.ledger.add(layer, "lora", p, lora)
        self.rg[self.node(layer, lin.dst)] = False

    def index_scores(self, index: int, step: IndexScores, passes: tuple[str, ...]) -> None:
        """A sparse-attention indexer's scores (`tuneproof.arch.indexer`): forward only, on each real
        document's causal triangle, or on every padded row's full square once both are switched on."""
        from tuneproof.arch.indexer import index_pairs, index_score_flops

        lengths = [self.run.seq_len] * self.run.batch if self.padded else self.run.document_lengths
        flops = index_score_flops(step, index_pairs(lengths, square=self.index_square))
        for p in passes:
            self.ledger.add(index, "attention.indexer", p, flops)
        self.rg[self.node(index, step.dst)] = False

    def attention(self, layer: LayerShape, att: Attention, passes: tuple[str, ...]) -> None:
        spec, pairs = layer.attention, self.pairs[layer.index]
        qk = 2.0 * pairs * spec.num_heads * spec.head_dim
        av = 2.0 * pairs * spec.num_heads * spec.v_head_dim
        q, k, v = (self.rg[self.node(layer.index, x)] for x in (att.q, att.k, att.v))
        for p in passes:
            self.ledger.add(layer.index, "attention.qk", p, qk)
            self.ledger.add(layer.index, "attention.av", p, av)
        scores = q or k or any(self.rg[self.node(layer.index, x)] for x in att.bias)
        out_rg = scores or v
        self.rg[self.node(layer.index, att.dst)] = out_rg
        if self.training and out_rg:
            self.ledger.add(layer.index, "attention.av", "backward", av * (int(scores) + int(v)))
            self.ledger.add(layer.index, "attention.qk", "backward", qk * (int(q) + int(k)))
            # a bidirectional layer's attention is the model's own matmuls whatever the path (CPM-Ant)
            if self.fused and (q or k) and spec.kind != "bidirectional":
                self.ledger.add(layer.index, "attention.qk_kernel_recompute", "backward", qk)

    def block_scores(self, index: int, step: BlockScores, passes: tuple[str, ...]) -> None:
        """A block indexer's scores (`BlockScores`): per query, its index heads against every whole
        block of keys it sees; on each real document, or on every padded row once padding is switched
        on (a pad query sees the row's real keys); forward only (and again in a recompute)."""
        from tuneproof.attention.pairs import visible_blocks

        rows = self.run.rows
        if self.padded and rows.is_packed:
            raise TuneproofError(
                f"{self.shape.model_type}'s block indexer on packed rows: which keys its pad queries see "
                "is not modelled",
                "cost this model on unpacked rows (one document per row)",
            )
        counts = (
            [(rows.width, sum(r)) for r in rows.docs]
            if self.padded
            else [(n, n) for r in rows.docs for n in r]
        )
        blocks = sum(visible_blocks(width, real, step.block) for width, real in counts)
        for p in passes:
            self.ledger.add(index, "attention.indexer", p, 2.0 * blocks * step.heads * step.head_dim)
        self.rg[self.node(index, step.dst)] = False

    def block_mix(self, layer: int | None, mix: BlockMix, passes: tuple[str, ...]) -> None:
        """Learned queries over stacked residual states (`BlockMix`): the scores' matmul and the mix's,
        each 2 x queries x blocks x width per token; backward as attention's, the queries being a
        parameter that needs a gradient in full fine-tuning only."""
        rows = self.tokens + (self.prefix if layer is not None else 0)
        gemm = 2.0 * rows * mix.queries * mix.blocks * mix.width
        for p in passes:
            self.ledger.add(layer, "block_residual", p, 2 * gemm)
        states, queries = self.rg[self.node(layer, mix.src)], self.run.mode == "full"
        out_rg = states or queries
        self.rg[self.node(layer, mix.dst)] = out_rg
        if self.training and out_rg:  # dQ, dK; then dP (the scores need it) and dV
            self.ledger.add(layer, "block_residual", "backward", gemm * (int(queries) + 2 * int(states) + 1))

    def core(self, index: int, rule: Core, passes: tuple[str, ...]) -> None:
        """A mixer core (linear attention, a state-space scan; `tuneproof.arch.mixers.mixer_flops`):
        on each real document, or on every padded row once padding is switched on; the depthwise convolution
        before it gets an input gradient when its input needs one and a weight gradient in full
        fine-tuning."""
        from tuneproof.arch.mixers import mixer_flops

        lengths = [self.run.seq_len] * self.run.batch if self.padded else self.run.document_lengths
        costs = [mixer_flops(rule, n) for n in lengths]
        forward, conv, backward = (sum(c[i] for c in costs) for i in range(3))
        for p in passes:
            self.ledger.add(index, "linear_attention", p, forward)
            self.ledger.add(index, "linear_attention.conv", p, conv)
        q, k, v = (self.rg[self.node(index, x)] for x in (rule.q, rule.k, rule.v))
        in_rg = q or k or v
        full = self.run.mode == "full"  # the convolution's weight trains
        self.rg[self.node(index, rule.dst)] = in_rg or full
        if self.training and in_rg:
            self.ledger.add(index, "linear_attention", "backward", backward)
        if self.training and (in_rg or full):
            self.ledger.add(index, "linear_attention.conv", "backward", conv * (int(in_rg) + int(full)))

    def steps(self, layer: LayerShape | None, steps: tuple[Op, ...], passes: tuple[str, ...]) -> None:
        idx = None if layer is None else layer.index
        costed = [s for s in steps if isinstance(s, Linear | Core)]
        last = costed[-1] if layer is not None and layer.recompute_stops_early and costed else None
        for s in steps:
            if isinstance(s, Linear):
                self.linear(idx, s, passes, last=s is last)
            elif isinstance(s, Attention):
                assert layer is not None
                self.attention(layer, s, passes)
            elif isinstance(s, Core):
                assert layer is not None  # the last op's inputs are saved before it runs: no re-run
                self.core(layer.index, s, passes if s is not last else ("forward",))
            elif isinstance(s, IndexScores):
                assert layer is not None
                self.index_scores(layer.index, s, passes)
            elif isinstance(s, BlockScores):
                assert layer is not None
                self.block_scores(layer.index, s, passes)
            elif isinstance(s, BlockMix):
                self.block_mix(idx, s, passes)
            elif isinstance(s, Join):
                self.rg[self.node(idx, s.dst)] = any(self.rg[self.node(idx, x)] for x in s.srcs)

    def frozen_run(self, layer: LayerShape) -> None:
        """A layer run under torch.no_grad (HRM's early low cycles): its forward GEMMs (and adapters'),
        never recomputed nor backpropagated; none of its outputs needs a gradient."""
        training, self.training = self.training, False
        self.steps(layer, layer.steps, ("forward",))
        self.training = training
        for s in layer.steps:
            self.rg[self.node(layer.index, s.dst)] = False

    def walk(self) -> Ledger:
        self.steps(None, self.shape.pre_steps, ("forward",))
        prev = "model:embed"
        layer_passes = ("forward", "recompute") if self.recompute and self.training else ("forward",)
        reads = self.shape.run_reads
        for pos, layer in enumerate(self.shape.runs):
            srcs = reads[pos] if reads else (prev,)
            self.rg[f"L{layer.index}:in"] = any(self.rg[n] for n in srcs)
            if pos in self.shape.no_grad_runs:
                self.frozen_run(layer)
            else:
                self.steps(layer, layer.outside, ("forward",))  # outside the checkpoint: no recompute
                self.steps(layer, layer.steps, layer_passes)
            prev = f"L{layer.index}:out"
        self.rg["model:final"] = self.rg[prev]
        self.steps(None, self.shape.post_steps, ("forward",))
        self.linear(None, self.shape.head, ("forward",))
        return self.ledger


def walk(shape: ModelShape, run: Step, state: WalkState, lora: Adaptation) -> Ledger:
    """FLOP rows of `run` on `shape` as `state` counts them, with `lora` what its LoRA adapts (checked:
    `tuneproof.arch.targets.check`; empty outside LoRA)."""
    if run.grad_ckpt and not shape.checkpointing:
        raise TuneproofError(
            f"transformers' {shape.model_type} model does not support gradient checkpointing "
            "(its supports_gradient_checkpointing is False)",
            "drop {grad_ckpt}",
            fields=("grad_ckpt",),
        )
    return _Walker(shape, run, state, lora).walk()
