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
- LoRA on fused experts (PEFT `target_parameters`, `RunSpec.lora_target_parameters`): PEFT's
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
    Step,
)
from tuneproof.arch.targets import peft_matches
from tuneproof.core.errors import TuneproofError, field_error
from tuneproof.runs.step import RunSpec

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


def _matches(name: str, targets: tuple[str, ...]) -> bool:
    """PEFT target_modules semantics on a module path: exact name or '.'-suffix."""
    return "all-linear" in targets or peft_matches(name, targets)


def _matches_parameter(name: str, targets: tuple[str, ...]) -> bool:
    """PEFT target_parameters semantics on a parameter path: exact name or '.'-suffix."""
    return peft_matches(name, targets)


def parameter_path(lin: Linear) -> str:
    """The path PEFT's target_parameters names `lin`'s weight by: a fused expert parameter is a
    parameter itself (`mlp.experts.gate_up_proj`), a 2-D weight is its module's `.weight`
    (`mlp.gate.weight`, a router applied as a raw matmul)."""
    return lin.name if lin.num_experts > 1 else f"{lin.name}.weight"


def adapted_in_place(lin: Linear, run: RunSpec) -> bool:
    """A weight PEFT's target_parameters adapts in place (W + A@B, formed on every use): a fused
    expert parameter, or a 2-D weight (PEFT's all-linear on MoE models wraps the router's)."""
    return (
        run.mode == "lora"
        and lin.component != "lm_head"
        and _matches_parameter(parameter_path(lin), run.lora_target_parameters)
    )


def trained_whole(lin: Linear, run: RunSpec) -> bool:
    """A module PEFT's modules_to_save copies and trains whole beside the adapters."""
    return run.mode == "lora" and peft_matches(lin.name, run.lora_modules_to_save)


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

    def __init__(self, shape: ModelShape, run: RunSpec, state: WalkState) -> None:
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
        embed_saved = run.mode == "lora" and peft_matches("embed_tokens", run.lora_modules_to_save)
        self.rg: dict[str, bool] = {
            "model:embed": full or embed_saved or (state.input_grads and run.grad_ckpt and self.training),
            "model:embed_per_layer": full,
        }
        self.ledger = Ledger()

    def adapted(self, lin: Linear) -> bool:
        return self.run.mode == "lora" and lora_adapts(self.shape.model_type, lin, self.run.lora_targets)

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
        in_place = adapted_in_place(lin, self.run)
        # a merged weight W + A@B gets its gradient; so does a module saved whole (modules_to_save)
        trainable = self.run.mode == "full" or in_place or trained_whole(lin, self.run)
        adapted = self.adapted(lin)
        r = self.run.rank_of(parameter_path(lin) if in_place else lin.name)
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
        rank = self.run.rank_of(lin.name)
        lora = 2.0 * n * rank * (lin.in_features + lin.out_features) if self.adapted(lin) else 0
        for p in passes:
            self.ledger.add(layer, lin.component, p, gemm)
            self.ledger.add(layer, "lora", p, lora)
        self.rg[self.node(layer, lin.dst)] = False

    def index_scores(self, index: int, step: IndexScores, passes: tuple[str, ...]) -> None:
        """A sparse-attention indexer's scores (`tuneproof.arch.indexer`): forward only, on each real
        document's causal triangle, or on every padded row's full square once both are switched on."""
        from tuneproof.arch.indexer import index_pairs, index_score_flops

        lengths = [self.run.seq_len] * self.run.batch if self.padded else self.run.document_lengths()
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

        rows = self.run.rows()
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

        lengths = [self.run.seq_len] * self.run.batch if self.padded else self.run.document_lengths()
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

    def steps(self, layer: LayerShape | None, steps: tuple[Step, ...], passes: tuple[str, ...]) -> None:
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


# PEFT refuses LoRA on these modules of these model types (peft/tuners/tuners_utils.py
# _check_lora_target_modules_mamba, PEFT 0.21): the fused Mamba kernels read their weights directly.
PEFT_MAMBA_TYPES = frozenset({"falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h"})
PEFT_MAMBA_REFUSED = frozenset({"out_proj", "conv1d"})


def lora_adapts(model_type: str, lin: Linear, targets: tuple[str, ...]) -> bool:
    """Whether LoRA on `targets` (PEFT target_modules semantics) wraps `lin`. "all-linear" is every
    adaptable module but those PEFT refuses on Mamba models (named explicitly, they are refused by
    `check_targets`; PEFT's own all-linear would raise on them)."""
    if not (lin.adaptable and _matches(lin.name, targets)):
        return False
    return not (model_type in PEFT_MAMBA_TYPES and lin.name.rpartition(".")[2] in PEFT_MAMBA_REFUSED)


def _why_not_adaptable(shape: ModelShape, target: str) -> str:
    """Why a target naming a GEMM LoRA does not adapt gets nothing: the LM head, a routed expert's
    fused parameter, or a module whose forward reads only its weight (Mamba-1's dt_proj,
    LongCat-Flash's router classifier, RG-LRU's block-diagonal gates)."""
    if target.endswith("lm_head"):
        return " (the LM head is never adapted here)"
    hit = [lin for lin in shape.linears() if not lin.adaptable and _matches(lin.name, (target,))]
    if any(lin.num_experts > 1 for lin in hit):
        return f": {target} is a routed expert's fused parameter (adapt it through lora_target_parameters)"
    if hit:
        return (
            f": transformers' forward applies {target} as a raw matmul with its weight (the module "
            "itself is never called), so an adapter there would never run"
        )
    return ""


def _own_names(shape: ModelShape) -> str:
    """The module names all-linear adapts in this model (the first ten)."""
    own = {
        x.name.rpartition(".")[2]
        for x in shape.linears()
        if lora_adapts(shape.model_type, x, ("all-linear",))
    }
    return ", ".join(sorted(own)[:10]) or "none"


def check_targets(shape: ModelShape, run: RunSpec) -> None:
    """PEFT raises when a target matches no module; so do we (in every mode: a typo is a typo). Under
    LoRA a rank above min(in_features, out_features) of every adapted module (a fused expert
    parameter counts with its per-expert matrix) is refused too: no adapter would be low-rank (PEFT
    accepts it and trains more weights than the module has)."""
    names = [lin.name for lin in shape.linears() if lin.adaptable]
    for t in run.lora_targets:
        if t != "all-linear" and not any(_matches(n, (t,)) for n in names):
            raise field_error(
                "lora_targets",
                f"{t!r} matches no nn.Linear module LoRA can adapt in this {shape.model_type} model"
                + _why_not_adaptable(shape, t),
                f"targets: all-linear or this model's module names: {_own_names(shape)}",
            )
    if run.mode != "lora":
        return
    named = tuple(t for t in run.lora_targets if t != "all-linear")
    if shape.model_type in PEFT_MAMBA_TYPES:
        hit = sorted(
            {
                lin.name.rpartition(".")[2]
                for lin in shape.linears()
                if lin.adaptable and _matches(lin.name, named)
            }
            & PEFT_MAMBA_REFUSED
        )
        if hit:
            raise field_error(
                "lora_targets",
                f"PEFT refuses LoRA on {', '.join(hit)} of {shape.model_type} models "
                "(peft tuners_utils._check_lora_target_modules_mamba)",
                "target the other projections, e.g. in_proj",
            )
    widest = max(
        (
            min(lin.in_features, lin.out_features)
            for lin in shape.linears()
            if lora_adapts(shape.model_type, lin, run.lora_targets) or adapted_in_place(lin, run)
        ),
        default=None,
    )
    if widest is not None and run.lora_rank > widest:
        raise field_error(
            "lora_rank",
            f"{run.lora_rank} is above {widest}, the largest min(in_features, out_features) of the "
            "modules it adapts: no adapter would be low-rank",
            f"pass a rank of at most {widest}",
        )


def check_target_parameters(shape: ModelShape, run: RunSpec) -> None:
    """PEFT raises when target_parameters match no parameter; so do we (a fused expert parameter, or a
    GEMM's 2-D weight, `mlp.gate.weight`; never the LM head's)."""
    names = sorted({parameter_path(lin) for lin in shape.linears() if lin.component != "lm_head"})
    experts = [lin.name for lin in shape.linears() if lin.num_experts > 1]
    for t in run.lora_target_parameters:
        if not any(_matches_parameter(n, (t,)) for n in names):
            raise field_error(
                "lora_target_parameters",
                f"{t!r} matches no fused expert parameter or GEMM weight of this {shape.model_type} model",
                f"its fused expert parameters: {', '.join(sorted(set(experts)))}"
                if experts
                else "it has none (adapt nn.Linear modules with lora_targets)",
            )


def walk(shape: ModelShape, run: RunSpec, state: WalkState) -> Ledger:
    """FLOP rows of `run` on `shape` as `state` counts them."""
    if run.grad_ckpt and not shape.checkpointing:
        raise TuneproofError(
            f"transformers' {shape.model_type} model does not support gradient checkpointing "
            "(its supports_gradient_checkpointing is False)",
            "drop {grad_ckpt}",
            fields=("grad_ckpt",),
        )
    check_targets(shape, run)
    check_target_parameters(shape, run)
    return _Walker(shape, run, state).walk()
