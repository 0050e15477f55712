"""Activations saved for backward, layer by layer, as autograd keeps them (torch 2.13, transformers 5.x).

Every rule names what autograd saves and is checked against the saved-tensor hooks and MemTracker's
Activation category on tiny random models (tests/memory/test_peak.py). N = B x T token slots (padding
included: a padded slot costs what a real one does), b = the activations' bytes (2 under bf16/fp16
autocast, 4 in fp32).

- Norms (`tuneproof.memory.norms`): the fp32 input and a (rows, 1) rsqrt; the normed tensor too when
  the norm's weight trains (full fine-tuning).
- GEMM inputs: autograd saves a GEMM's input only when its weight needs a gradient (torch's derivative
  formulas save `self` for the `mat2` gradient alone): each distinct input once under full fine-tuning;
  under LoRA the adapter's A keeps its input and B keeps A's output (N x r). PEFT casts the input to
  the adapter's fp32 (`_cast_input_dtype`) and autocast casts it back for the GEMM: under bf16 each
  adapted module keeps its own copy (q, k and v three), in fp32 they share the one input.
- Routed experts: each token's rows gathered once per chosen expert (N x k x in), the gate/up output,
  the activation and the product (N x k x 3i), the expert outputs and the routing weights, the
  router's fp32 probabilities and the sort indices.
- Attention, by the backend dispatch picks: eager and SDPA's math keep the B x H x T x T
  probabilities (fp32 and a bf16 copy under eager in bf16: transformers' softmax runs in fp32) and K,V
  repeated to every query head; flash, efficient, cuDNN, CPU flash and flex keep q, k, v, the output
  and an fp32 log-sum-exp per query row. A materialised mask stops SDPA's enable_gqa in transformers
  (`use_gqa_in_sdpa`), so K and V are repeated to every head first. The o_proj input is a contiguous
  copy of the attention output.
- Loss: the fp32 log-softmax over B x T x V (`ForCausalLMLoss` upcasts the logits).
"""

from __future__ import annotations

from dataclasses import dataclass

from tuneproof.arch.shape import Attention, Join, LayerShape, Linear, ModelShape
from tuneproof.memory.norms import Norm
from tuneproof.runs.step import Step

FP32 = 4
INDEX = 8  # int64
# Gated activations that keep more than the gate/up outputs and the activation's output, by family:
# extra (rows, width) tensors per gated block. gpt-oss: transformers models/gpt_oss/modeling_gpt_oss.py
# GptOssExperts._apply_gate clamps gate and up, keeps sigmoid(alpha * gate), the GLU and up + 1.
EXTRA_GATED = {"gpt_oss": 3}
GATED = "gate, up, act"  # how a gated block's item ends


@dataclass(kw_only=True, frozen=True, slots=True)
class Item:
    """Bytes one kind of saved tensor takes in one layer (or once for the model), and what it is."""

    component: str  # "norms", "projections", "adapters", "mlp", "experts", "attention", "loss", ...
    nbytes: int
    what: str
    half: str = "ffn"  # the part of the layer that keeps it: "attn" (freed last in backward) or "ffn"


@dataclass(kw_only=True, frozen=True, slots=True)
class Geometry:
    """What sizes one step's activations: B, T, the activations' bytes, the mode, which attention
    backend each softmax layer runs (`backends[layer index]`), whether the embedding output carries a
    gradient (full fine-tuning; LoRA under checkpointing: `enable_input_require_grads`), and the
    attention dropout."""

    batch: int
    width: int
    act_bytes: int
    run: Step
    backends: dict[int, str]
    masked: dict[int, bool]
    input_grads: bool
    dropout: float = 0.0
    weight_bytes: int = 2
    softcap: bool = False  # attention logits soft-capped (Gemma 2): eager keeps tanh's output too
    logit_softcap: bool = False  # final logits soft-capped: tanh's output over B x T x V
    stream_bytes: int = 0  # the residual stream's bytes: the weights' under autocast (0: the activations')
    autocast: bool = True  # under torch.autocast (the Trainer's bf16/fp16 flag)

    def __post_init__(self) -> None:
        if not self.stream_bytes:
            object.__setattr__(self, "stream_bytes", self.act_bytes)

    @property
    def tokens(self) -> int:
        return self.batch * self.width


FUSED = ("flash", "efficient", "cudnn", "flex", "cpu_flash", "overrideable")


def fused(backend: str) -> bool:
    """A backend that keeps O(T) statistics, not the T x T probabilities."""
    return any(backend.startswith(name) for name in FUSED) or backend in ("flash_attention_2",)


def _trains(layer: int | None, lin: Linear, shape: ModelShape, run: Step) -> tuple[bool, int, bool]:
    """(the weight trains whole, the LoRA rank adapting it or 0, adapted in place: PEFT's
    target_parameters, whose merged weight W + BA the GEMM then reads), as `tuneproof.arch.targets`
    resolves the step's LoRA on this model."""
    from tuneproof.arch.targets import adaptation

    if lin.no_grad:
        return False, 0, False
    if run.mode != "lora":
        return True, 0, False
    place = adaptation(shape, run.lora).place(layer, lin)
    if place.how == "whole":
        return True, 0, False
    return False, place.rank, place.how == "parameter"


def norm_items(norms: tuple[Norm, ...], g: Geometry, weights_train: bool, skip_first: bool) -> list[Item]:
    items = []
    for norm in norms:
        if skip_first and norm.name.endswith("input_layernorm"):
            continue  # its input (the embedding output) carries no gradient: nothing is recorded
        rows = g.tokens * norm.rows_per_token
        elements = rows * norm.width
        if norm.kind == "layer":
            nbytes = elements * g.act_bytes + 2 * FP32 * rows
        elif norm.kind == "centered":
            nbytes = 2 * elements * FP32 + FP32 * rows + (elements * FP32 if weights_train else 0)
        else:
            nbytes = elements * FP32 + FP32 * rows
            if weights_train and norm.kind == "rms":  # in its input's dtype: a per-head norm reads a GEMM's
                nbytes += elements * (g.act_bytes if norm.rows_per_token > 1 else g.stream_bytes)
            elif weights_train and norm.kind == "rms_offset":
                nbytes += elements * FP32 + FP32 * norm.width
        half = "attn" if ("input_layernorm" in norm.name or "attn" in norm.name) else "ffn"
        items.append(
            Item(component="norms", nbytes=nbytes, what=f"{norm.name}: fp32 input and rsqrt", half=half)
        )
    return items


def _widths(layer: LayerShape) -> dict[str, tuple[int, float]]:
    """Each GEMM output node: (width, rows per token); a node two GEMMs write (Qwen2-MoE's shared
    expert gate and its gate_proj) keeps its first writer's."""
    widths: dict[str, tuple[int, float]] = {}
    for s in layer.steps:
        if isinstance(s, Linear):
            widths.setdefault(s.dst, (s.out_features, s.tokens_per_token))
    return widths


def attention_half(lin: Linear) -> str:
    """Which part of its layer a GEMM belongs to: backward frees the feed-forward part's tensors
    first, the attention part's last."""
    attn = ("attn" in lin.name or "attention" in lin.component or lin.component.endswith(("q_proj", "k_proj",
            "v_proj", "o_proj")))  # fmt: skip
    return "attn" if attn else "ffn"


def _stream_nodes(layer: LayerShape) -> set[str]:
    """Nodes of the residual stream (the layer's input and what norms and residual adds make of it),
    as opposed to GEMM and attention outputs: with fp32 weights they stay fp32 under autocast."""
    made = {s.dst for s in layer.steps if isinstance(s, (Linear, Attention))}
    for s in layer.steps:
        if isinstance(s, Join) and all(src in made for src in s.srcs):
            made.add(s.dst)
    return {s.src for s in layer.steps if isinstance(s, Linear) and s.src not in made}


def gemm_items(layer: LayerShape, shape: ModelShape, g: Geometry) -> list[Item]:
    """GEMM inputs kept for the weights' gradients, LoRA's own tensors, and the activation blocks
    between GEMMs (a gated MLP's gate, activation and up outputs)."""
    n, b, run = g.tokens, g.act_bytes, g.run
    srcs: dict[str, int] = {}
    halves: dict[str, str] = {}
    items = []
    attn_out = (
        {s.dst for s in layer.steps if isinstance(s, Attention)}
        if fused(g.backends.get(layer.index, ""))
        else set()
    )
    cast = _stream_nodes(layer) if g.stream_bytes != b else set()
    for lin in (s for s in layer.steps if isinstance(s, Linear)):
        half = attention_half(lin)
        whole, rank, in_place = _trains(layer.index, lin, shape, run)
        rows = round(n * lin.tokens_per_token)
        expert = lin.num_experts > 1 or lin.tokens_per_token != 1
        # autocast casts an fp32 residual-stream input for each GEMM that reads it: one copy each
        key = lin.src + (":experts" if expert else "") + (f":{lin.name}" if lin.src in cast else "")
        if (whole or in_place or (rank and b == FP32)) and lin.src not in attn_out:
            srcs[key] = max(srcs.get(key, 0), rows * lin.in_features * b)
            halves.setdefault(key, half)
        if in_place:  # the merged weight is a new tensor the GEMM keeps for its input's gradient
            merged = lin.num_experts * lin.in_features * lin.out_features * g.weight_bytes
            items.append(
                Item(
                    component="adapters",
                    nbytes=merged,
                    what=f"{lin.name}: the merged weight W + BA (PEFT target_parameters)",
                    half=half,
                )
            )
        elif rank:
            # PEFT casts the input to the fp32 adapter: autocast casts it back (a copy in b, and A's and
            # B's weights cast too); without autocast the fp32 copy and A's fp32 output are what is kept
            a = b if g.autocast else FP32
            copy = (
                0
                if b == FP32
                else rows * lin.in_features * a
                + (rank * (lin.in_features + lin.out_features) * b if g.autocast else 0)
            )
            what = f"{lin.name}: LoRA A's output (N x {rank})" + (
                f", its own {'bf16' if a < FP32 else 'fp32'} copy of the input (PEFT's fp32 cast"
                + (", autocast back)" if g.autocast else ")")
                if copy
                else ""
            )
            items.append(Item(component="adapters", nbytes=copy + rows * rank * a, what=what, half=half))
    items += [
        Item(component="projections", nbytes=v, what=f"GEMM input {k}", half=halves[k])
        for k, v in srcs.items()
    ]
    return items + _blocks(layer, g, shape.model_type)


def _blocks(layer: LayerShape, g: Geometry, model_type: str) -> list[Item]:
    """Between two GEMMs: a gated activation keeps the gate and up outputs and the activation's
    output (3 x width); a plain activation its input."""
    widths = _widths(layer)
    joins = {s.dst: s.srcs for s in layer.steps if isinstance(s, Join)}
    items = []
    for lin in (s for s in layer.steps if isinstance(s, Linear)):
        srcs = joins.get(lin.src, (lin.src,))
        if not srcs or not all(src in widths for src in srcs):
            continue
        total = sum(widths[src][0] for src in srcs)
        rows = round(g.tokens * max(widths[src][1] for src in srcs))
        if total == 2 * lin.in_features:
            kept = 3 + EXTRA_GATED.get(model_type, 0)
            items.append(
                Item(
                    component="mlp",
                    nbytes=kept * rows * lin.in_features * g.act_bytes,
                    what=f"{lin.name}: {GATED}",
                )
            )
        elif lin.src in joins and total == lin.in_features:
            items.append(
                Item(
                    component="mlp",
                    nbytes=rows * lin.in_features * g.act_bytes,
                    what=f"{lin.name}: activation input",
                )
            )
    return items


def routing_items(layer: LayerShape, shape: ModelShape, g: Geometry) -> list[Item]:
    """A routed MoE layer's own tensors (transformers' experts interface, eager: sorted rows)."""
    linears = [s for s in layer.steps if isinstance(s, Linear)]
    router = next((s for s in linears if s.component == "router"), None)
    experts = [s for s in linears if s.num_experts > 1 and not s.dense]
    if router is None or not experts:
        return []
    n, k = g.tokens, experts[0].tokens_per_token
    rows = round(n * k)
    nbytes = (
        n * router.out_features * FP32 + rows * (4 * INDEX + FP32) + rows * shape.hidden_size * g.act_bytes
    )
    return [
        Item(
            component="experts",
            nbytes=nbytes,
            what=f"routing: fp32 router probabilities, {k:g} expert outputs per token",
        )
    ]


def _fused_v(layer: LayerShape, per_token_v: int) -> int:
    """V's width as autograd keeps it: a slice of a fused QKV GEMM's output (Phi-3's qkv_proj) keeps the
    whole output alive when it is saved as it is."""
    attn = next(s for s in layer.steps if isinstance(s, Attention))
    joins = {s.dst: s.srcs for s in layer.steps if isinstance(s, Join)}
    srcs = joins.get(attn.v, ())
    if len(srcs) == 1:
        widths = _widths(layer)
        if srcs[0] in widths and widths[srcs[0]][0] > per_token_v:
            return widths[srcs[0]][0]
    return per_token_v


def attention_items(layer: LayerShape, g: Geometry) -> list[Item]:
    spec = layer.attention
    if not spec.softmax or not any(isinstance(s, Attention) for s in layer.steps):
        return []
    backend = g.backends.get(layer.index, "math")
    bsz, t, b = g.batch, g.width, g.act_bytes
    h, hk, d, dv = spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    if fused(backend):
        repeat = g.masked.get(layer.index, False) or d != dv or d > 256
        kv = h if (repeat and backend != "flash_attention_2") else hk
        v = kv * dv if repeat else _fused_v(layer, kv * dv)
        qkv = bsz * t * (h * d + kv * d + v) * b
        out = bsz * t * h * dv * b  # laid out (B, T, H, d): o_proj's input is a view of it
        lse = bsz * h * t * FP32
        return [
            Item(
                component="attention",
                nbytes=qkv + out + lse,
                what=f"{backend}: q, k, v, output, fp32 log-sum-exp",
                half="attn",
            )
        ]
    scores = bsz * h * t * t
    probs = scores * (FP32 + (b if b != FP32 else 0) + (b if g.softcap else 0))  # softcapping: tanh's output
    if g.dropout > 0:
        probs += scores * (1 + b)  # the dropout mask and the dropped probabilities
    qkv = bsz * t * h * (2 * d + dv) * b  # K and V repeated to every query head
    return [
        Item(
            component="attention",
            nbytes=probs,
            what=f"{backend}: B x H x T x T probabilities ({bsz} x {h} x {t}^2)",
            half="attn",
        ),
        Item(
            component="attention",
            nbytes=qkv,
            what=f"{backend}: q, and k and v repeated to {h} heads",
            half="attn",
        ),
    ]


def layer_items(
    layer: LayerShape, shape: ModelShape, norms: tuple[Norm, ...], g: Geometry, first: bool
) -> list[Item]:
    """Everything one layer keeps for backward."""
    weights_train = g.run.mode != "lora"
    skip = first and not g.input_grads
    return (
        norm_items(norms, g, weights_train, skip)
        + gemm_items(layer, shape, g)
        + routing_items(layer, shape, g)
        + attention_items(layer, g)
    )


def mask_items(shape: ModelShape, g: Geometry) -> list[Item]:
    """The (B, 1, T, T) masks transformers builds once per forward, one per kind of layer that gets one
    (full, each window, each chunk): eager's in the activations' dtype (added to the scores), SDPA's
    bool where dispatch says it is materialised. Layer inputs under checkpointing: kept to the end of
    backward."""
    kinds: dict[tuple[str, int | None], int] = {}
    for layer in shape.layers:
        backend = g.backends.get(layer.index)
        if backend is None:
            continue
        key = (layer.attention.kind, layer.attention.locality)
        if backend in ("eager", "math") and g.run.attn == "eager":
            kinds[key] = g.act_bytes
        elif g.masked.get(layer.index):
            kinds[key] = max(kinds.get(key, 0), 1)
    area = g.batch * g.width * g.width
    return [
        Item(component="mask", nbytes=area * size, what=f"{kind} mask (B x 1 x T x T, {size} B)")
        for (kind, _), size in kinds.items()
    ]


def model_items(shape: ModelShape, final: tuple[Norm, ...], g: Geometry, rotary_dim: int) -> list[Item]:
    """Once per step: token ids, rotary tables, the final norm, the LM head's input, the loss."""
    n, v = g.tokens, shape.vocab_size
    items = [Item(component="embedding", nbytes=n * INDEX, what="token ids")]
    items += mask_items(shape, g)
    if rotary_dim:
        items.append(
            Item(
                component="embedding",
                nbytes=2 * g.width * rotary_dim * g.act_bytes,
                what="rotary cos and sin",
            )
        )
    items += norm_items(final, g, g.run.mode != "lora", False)
    whole = _trains(None, shape.head, shape, g.run)[0]
    if whole:
        items.append(
            Item(component="lm_head", nbytes=n * shape.hidden_size * g.act_bytes, what="LM head input")
        )
    items.append(
        Item(
            component="loss",
            nbytes=n * v * FP32 + n * INDEX,
            what=f"fp32 log-softmax over B x T x V ({n} x {v})",
        )
    )
    if g.logit_softcap:
        items.append(
            Item(component="loss", nbytes=n * v * g.act_bytes, what="the soft-capped logits' tanh output")
        )
    return items
