"""Which attention kernel each layer really gets, and why: the dispatch chain.

For every distinct attention geometry of a model (sliding/global, head_dim, kv heads) it answers:
does transformers materialise a mask (and which condition decides), which SDPA backend runs (and
why each higher-priority backend was refused), and which kernel family that means.

Two sources, always labelled: "live" asks the installed transformers and PyTorch on the device
present (`_ignore_causal_mask_sdpa`, `torch._fused_sdp_choice`, `can_use_*(..., debug=True)`);
"predicted" applies the rule table in `tuneproof.attention.rules` for a device that is not here
(explaining an sm_120 run from a laptop). Live wins when both are available (`tuneproof.attention.live`).

`tuneproof explain` is `prepare(ExplainSpec(model=..., context=...))` then `run(plan)`: an `Explanation`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuneproof.arch.shape import Attention, AttentionSpec, ModelShape
from tuneproof.attention import rules as R
from tuneproof.attention.live import LIVE_LEN as LIVE_LEN
from tuneproof.attention.live import device_present, version_notes
from tuneproof.attention.live import live_mask as _live_mask
from tuneproof.attention.live import live_sdpa as _live_sdpa
from tuneproof.attention.paths import PATHS, path, performed_for
from tuneproof.core import validate
from tuneproof.core.dtypes import MODEL_DTYPES
from tuneproof.core.errors import TuneproofError
from tuneproof.core.verdict import FINDING, NoWarnings, Verdict
from tuneproof.hardware.capability import KNOWN_CAPABILITIES
from tuneproof.hardware.card import CPU, Card
from tuneproof.runs.step import Rows, Step

if TYPE_CHECKING:
    from tuneproof.attention.stack import Stack


@dataclass(kw_only=True, frozen=True, slots=True)
class Context:
    """What the explanation is about: the step (`runs.step.Step`: its rows, attention path, whether it
    trains, torch.compile), the card it runs on (`hardware.card.Card`: capability and shared memory; the
    CPU when none is named), the activations' dtype, and the attention dropout the config sets (SDPA gets
    it in training only; None: not known yet, `commands.explain` fills it from the model's config)."""

    step: Step
    card: Card = CPU
    dtype: str = "bf16"
    dropout: float | None = None
    cudnn: int | str | None = None  # runtime cuDNN, '9.23.1' or 92301; None: the device's, or assumed
    cuda: str | None = None  # the CUDA build of torch, '12.8'; None: the device's, or assumed

    def __post_init__(self) -> None:
        path(self.step.attn)
        validate.choice("dtype", self.dtype, MODEL_DTYPES)
        if self.dropout is not None:
            validate.real("dropout", self.dropout, low=0.0, high=1.0, high_open=True, hint="a probability")
        if self.cudnn is not None and not isinstance(self.cudnn, int):
            from tuneproof.attention.stack import parse_cudnn

            object.__setattr__(self, "cudnn", parse_cudnn(self.cudnn))
        if self.cuda is not None:
            from tuneproof.attention.stack import parse_cuda

            parse_cuda(self.cuda)
        if self.capability is not None and self.capability not in KNOWN_CAPABILITIES:
            raise TuneproofError(
                f"unknown {{capability}} {self.capability}", "use MAJOR.MINOR", fields=("capability",)
            )

    # the step's and the card's facts, by the names the rules read
    @property
    def seq_len(self) -> int:
        return self.step.seq_len

    @property
    def batch(self) -> int:
        return self.step.batch

    @property
    def attn(self) -> str:
        return self.step.attn

    @property
    def padded(self) -> bool:
        return self.step.rows.is_padded

    @property
    def packed(self) -> bool:
        return self.step.rows.is_packed

    @property
    def compiled(self) -> bool:
        return self.step.compiled

    @property
    def training(self) -> bool:
        return self.step.mode != "forward"

    @property
    def capability(self) -> tuple[int, int] | None:
        return self.card.capability

    @property
    def smem_limit(self) -> int | None:
        return self.card.smem_limit

    @property
    def smem_source(self) -> str | None:
        return self.card.smem_source

    @property
    def rows(self) -> Rows:
        return self.step.rows

    @property
    def sdpa_dropout(self) -> float:
        """The dropout_p SDPA receives: the attention dropout in training, 0 otherwise."""
        return (self.dropout or 0.0) if self.training else 0.0

    @property
    def device(self) -> str:
        return "cpu" if self.capability is None else f"cuda sm_{self.capability[0]}{self.capability[1]}"


@dataclass(kw_only=True, slots=True)
class LayerExplanation:
    layer_type: str
    head_dim: int
    num_heads: int
    num_kv_heads: int
    num_layers: int
    mask_materialised: bool
    mask_reason: str
    backend: str
    refused: dict[str, str]
    kernel: str
    source: str  # "live" | "predicted"
    # attention calls in these layers: 2 per layer for LongCat-Flash's two attention sub-layers and
    # DiffLlama's differential pair, else num_layers
    attention_calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(kw_only=True, slots=True)
class Explanation(NoWarnings):
    context: Context
    layers: list[LayerExplanation]
    advice: list[str]
    notes: list[str] = field(default_factory=list)
    kernel_options: dict[str, Any] | None = None  # flex's options for the card, per pass (`_kernel_options`)
    isolation: dict[str, Any] | None = None  # the live check that packed documents stay apart, when run
    hidden_packing: str | None = None  # why this model's forward lets packed documents meet (read, not run)
    stack: Stack | None = None  # the software a CUDA answer rests on (versions, what was assumed)
    model: str = ""  # the model explained, as named by the caller

    @property
    def verdict(self) -> Verdict | None:
        """None (an explanation judges nothing), except for packed documents: the live check's
        ISOLATED or ATTEND (a finding, exit 1), or without it ATTEND where the model's own forward
        hides packing from transformers (read from its source)."""
        if self.isolation is not None:
            if self.isolation["isolated"]:
                return Verdict(outcome="ISOLATED", reason=self.isolation["summary"])
            return Verdict(outcome="ATTEND", reason=self.isolation["summary"], exit_code=FINDING)
        if self.hidden_packing:
            return Verdict(
                outcome="ATTEND",
                reason=f"packed documents attend to each other: {self.hidden_packing}",
                exit_code=FINDING,
            )
        return None

    def render(self, console: Any) -> None:
        from tuneproof.attention.render import render_explanation

        render_explanation(self, console)

    def to_dict(self) -> dict[str, Any]:
        c = self.context
        return (
            {
                "model": self.model or None,
                "context": {
                    "seq_len": c.seq_len,
                    "batch": c.batch,
                    "attn": c.attn,
                    "padded": c.padded,
                    "packed": c.packed,
                    "dtype": c.dtype,
                    "training": c.training,
                    "device": c.device,
                    "smem_limit": c.smem_limit,
                    "smem_source": c.smem_source,
                    "dropout": c.dropout,
                    "sdpa_dropout": c.sdpa_dropout,
                    "compiled": c.compiled,
                },
                "stack": self.stack.to_dict() if self.stack is not None else None,
                "assumptions": self.stack.assumptions if self.stack is not None else [],
                "layers": [layer.to_dict() for layer in self.layers],
                "advice": self.advice,
                "notes": self.notes,
                "flex_kernel_options": self.kernel_options,
            }
            | ({"isolation": self.isolation} if self.isolation is not None else {})
            | ({"verdict": verdict.to_dict()} if (verdict := self.verdict) is not None else {})
        )


def predict_mask(ctx: Context, spec: AttentionSpec) -> tuple[bool, str]:
    """Does transformers hand the attention a dense mask tensor, and which condition decides
    (the attention path table's rule, shared with the FLOP ledger)."""
    mask = performed_for(path(ctx.attn), ctx.rows, spec).mask
    return mask.materialised, mask.reason


def predict_sdpa_cuda(
    ctx: Context, spec: AttentionSpec, mask: bool, stack: Stack | None = None
) -> tuple[str, dict[str, str], str]:
    """(backend, refusal reason per backend tried before it, kernel) on CUDA: PyTorch's chooser
    (`tuneproof.attention.sdpa_cuda`) on the call transformers makes for this layer."""
    from tuneproof.attention.sdpa_cuda import choose, sdpa_call

    cap = ctx.capability
    assert cap is not None
    call = sdpa_call(
        cap, ctx.dtype, spec.head_dim, spec.v_head_dim, mask, ctx.sdpa_dropout, ctx.training,
        spec.num_heads, spec.num_kv_heads, stack or cuda_stack(ctx), ctx.batch,
    )  # fmt: skip
    backend, refused = choose(call)
    return backend, refused, R.sdpa_kernel(backend, spec.head_dim, cap)


def cuda_stack(ctx: Context) -> Stack:
    """The software stack a CUDA answer rests on: the device's own when it is here, else the user's
    versions, else what the installed torch's release ships (said to be assumed)."""
    from tuneproof.attention.stack import parse_cuda, stack_for

    cudnn = ctx.cudnn if isinstance(ctx.cudnn, int) else None
    return stack_for(device_present(ctx), cudnn, parse_cuda(ctx.cuda) if ctx.cuda else None)


def predict_sdpa_cpu(ctx: Context, spec: AttentionSpec) -> tuple[str, dict[str, str], str]:
    """SDPA on the CPU: its flash kernel unless `rules.cpu_refusal` says why not; then math."""
    why = R.cpu_refusal(ctx.sdpa_dropout, spec.head_dim, spec.v_head_dim)
    backend = "math" if why else "cpu_flash"
    refused = {"cpu_flash": why} if why else {}
    return backend, refused, R.sdpa_kernel(backend, spec.head_dim) + " (" + R.SOURCES["cpu"] + ")"


@dataclass(kw_only=True, frozen=True, slots=True)
class Prediction:
    """What the rules predict for one attention geometry: is a mask materialised and why, the backend
    chosen, why each higher-priority backend was refused, and the kernel that runs. Unpacks as
    (mask_materialised, mask_reason, backend, refused, kernel)."""

    mask_materialised: bool
    mask_reason: str
    backend: str
    refused: dict[str, str]
    kernel: str

    def __iter__(self) -> Iterator[Any]:
        return iter((self.mask_materialised, self.mask_reason, self.backend, self.refused, self.kernel))


def predict(ctx: Context, spec: AttentionSpec, stack: Stack | None = None) -> Prediction:
    """The rules' answer for `spec` under `ctx`: a path with its own kernel (the path table's), SDPA's
    CPU choice, or SDPA's CUDA chain (on `stack`, else `cuda_stack(ctx)`)."""
    mask, mask_reason = predict_mask(ctx, spec)
    own = path(ctx.attn).kernel
    if ctx.attn == "flash_attention_2" and spec.kind == "chunked" and spec.chunk and ctx.seq_len > spec.chunk:
        why = f"width {ctx.seq_len} > chunk {spec.chunk}: {mask_reason}"
        return Prediction(
            mask_materialised=mask,
            mask_reason=mask_reason,
            backend="refused",
            refused={"flash_attention_2": why},
            kernel="none: transformers raises",
        )
    if own is not None:
        kernel = own.on(ctx.capability)
        rows = ctx.rows
        if ctx.attn == "flash_attention_2" and not (rows.is_padded or rows.is_packed):
            kernel = kernel.replace(
                "varlen kernels (flash_attn_varlen_func)", "dense kernels (flash_attn_func)"
            )
        return Prediction(
            mask_materialised=mask, mask_reason=mask_reason, backend=own.backend, refused={}, kernel=kernel
        )
    if ctx.capability is None:
        backend, refused, kernel = predict_sdpa_cpu(ctx, spec)
        return Prediction(
            mask_materialised=mask, mask_reason=mask_reason, backend=backend, refused=refused, kernel=kernel
        )
    backend, refused, kernel = predict_sdpa_cuda(ctx, spec, mask, stack)
    return Prediction(
        mask_materialised=mask, mask_reason=mask_reason, backend=backend, refused=refused, kernel=kernel
    )


def explain(shape: ModelShape, ctx: Context, live: bool = True) -> Explanation:
    """Explain every attention geometry of `shape` under `ctx`. Live where the device is present.
    A packed batch on a model whose forward hides packing from transformers
    (`tuneproof.attention.packed_detection`) is explained as the kernel sees it: one sequence per row."""
    packing_note, seen = _packing(shape, ctx)
    live_ok = live and device_present(ctx)
    stack = cuda_stack(ctx) if ctx.capability is not None and ctx.attn == "sdpa" else None
    layers = []
    for idxs in shape.attention_groups.values():
        spec = shape.layers[idxs[0]].attention
        p = predict(seen, spec, stack)
        mask, mask_reason = p.mask_materialised, p.mask_reason
        backend, refused, kernel, source = p.backend, p.refused, p.kernel, "predicted"
        if live_ok and ctx.attn == "sdpa":
            # under torch.compile the mask decision is traced: the rule stands (tests check it live)
            got_mask = None if ctx.compiled else _live_mask(seen, spec)
            if got_mask is not None:
                mask, mask_reason = got_mask
            backend, refused, kernel = _live_sdpa(seen, spec, mask)
            source = "live"
        layers.append(
            LayerExplanation(
                layer_type=spec.kind, head_dim=spec.head_dim, num_heads=spec.num_heads,
                num_kv_heads=spec.num_kv_heads, num_layers=len(idxs), mask_materialised=mask,
                mask_reason=mask_reason, backend=backend, refused=refused, kernel=kernel, source=source,
                attention_calls=sum(isinstance(s, Attention) for i in idxs for s in shape.layers[i].steps),
            )
        )  # fmt: skip
    from tuneproof.attention.mixer_notes import mixer_notes

    notes = (
        version_notes() + ([packing_note] if packing_note else []) + mixer_notes(shape, ctx.rows.is_packed)
    )
    if stack is not None and stack.assumptions:
        notes.append(
            "assumed, not read off a card ('tuneproof explain' takes the versions as options): "
            + "; ".join(stack.assumptions)
        )
    if ctx.attn in shape.attn_refused:
        notes.insert(
            0,
            f"transformers will not run {ctx.attn} for {shape.model_type} "
            f"({shape.attn_refused[ctx.attn]}): this explains what it would do",
        )
    from tuneproof.attention.flex_advice import kernel_options

    options = kernel_options(ctx, layers)
    if ctx.attn == "flex_attention" or any(x.mask_materialised and x.layer_type == "sliding" for x in layers):
        notes += sorted(
            {f"flex estimate: {c}" for v in (options or {}).values() for c in v.get("caveats", [])}
        )
    unfit = [v["reason"] for v in (options or {}).values() if v["options"] is None]
    if ctx.attn == "flex_attention" and unfit:  # the kernel cannot be built for this card
        for x in layers:
            x.kernel = f"none: flex_attention cannot compile on this card ({unfit[0]})"
    if ctx.attn == "flex_attention" and ctx.training and ctx.sdpa_dropout > 0:
        for x in layers:
            x.kernel = f"none: {FLEX_DROPOUT}"
    advice = advise(shape, ctx, layers)
    hidden = None
    if seen is not ctx:  # transformers never finds the documents of this model's packed rows
        from tuneproof.attention.packed_detection import packed_detection

        detection = packed_detection(shape.model_type)
        assert detection is not None
        hidden = detection.blind(ctx.attn)
        advice.insert(0, f"{detection.fix()}: on {ctx.attn} the documents of a row attend to each other "
                      "with this model")  # fmt: skip
    return Explanation(
        context=ctx,
        layers=layers,
        advice=advice,
        notes=notes,
        kernel_options=options,
        hidden_packing=hidden,
        stack=stack,
    )


LIVE_HINT = "; 'tuneproof explain --packed --live' runs the proof"  # left out where it has just run


def _packing(shape: ModelShape, ctx: Context) -> tuple[str, Context]:
    """For a packed batch: the line saying whether the documents stay apart on this path and model,
    and the context the kernel really sees (unpacked rows where transformers never detects packing)."""
    if not ctx.packed:
        return "", ctx

    from tuneproof.attention.isolation import documents_line
    from tuneproof.attention.packed_detection import packed_detection

    detection = packed_detection(shape.model_type)
    blind = detection.blind(ctx.attn) if detection is not None else ""
    if blind and ctx.attn != "flash_attention_2":
        return (
            f"packed documents attend to each other: {blind} (each row is explained as the one sequence the "
            f"kernel sees{LIVE_HINT})",
            _unpacked(ctx),
        )
    line = documents_line(ctx.attn, ctx.batch)
    return (f"{line}; {blind}" if blind else line), ctx


def _unpacked(ctx: Context) -> Context:
    """The context with every row one whole sequence: no padding, no packed documents."""
    from dataclasses import replace

    plain = replace(ctx.step, lengths=None, documents=None, padding_fraction=0.0)
    return replace(ctx, step=plain)


# The advice lines whose whole cost is attention FLOPs (the ledger's per-attention-group excess):
# a caller that knows that excess is small can leave them out.
FLEX_ADVICE = "use flex_attention"
BUCKET_ADVICE = "bucket to avoid padding"


def _flex_training_on_cpu(ctx: Context) -> bool:
    """Training on the CPU, where flex_attention has no backward (the path table's `backward_on_cpu`)."""
    import torch

    cpu = ctx.capability is None and not torch.cuda.is_available()
    return ctx.training and cpu and not PATHS["flex_attention"].backward_on_cpu


FLEX_DROPOUT = (
    "transformers' flex_attention raises on attention dropout > 0 in training "
    "(integrations/flex_attention.py flex_attention_forward)"
)


def _spec_of(shape: ModelShape, x: LayerExplanation) -> AttentionSpec | None:
    """The geometry behind an explained layer group."""
    for idxs in shape.attention_groups.values():
        spec = shape.layers[idxs[0]].attention
        if spec.kind == x.layer_type and spec.head_dim == x.head_dim and spec.num_heads == x.num_heads:
            return spec
    return None


def _unpadded_falls_to_math(shape: ModelShape, ctx: Context, x: LayerExplanation) -> bool:
    """Would this masked layer run math once bucketing drops the mask (GQA on the memory-efficient
    kernel before torch 2.14, where flash cannot run)?"""

    spec = _spec_of(shape, x)
    if spec is None or ctx.attn != "sdpa":
        return False
    return x.backend != "math" and predict(_unpacked(ctx), spec).backend == "math"


def _math_advice(ctx: Context, x: LayerExplanation) -> str:
    """Why a layer fell to SDPA's math backend, and what lifts it."""
    refusals = " ".join(x.refused.values())
    square = f"{ctx.seq_len}x{ctx.seq_len}"
    head = (
        f"the {x.layer_type} layers ({x.num_layers}) run SDPA's math backend: the full {square} score matrix "
        "in memory (upcast to fp32 for 16-bit inputs)"
    )
    if "dropout" in refusals:
        keep = "set it to 0 to keep a fused kernel"
        return f"{head}; SDPA gets attention_dropout {ctx.sdpa_dropout:g} in training: {keep}"
    if "only equal head counts" in refusals:
        return (
            f"{head}: transformers passes enable_gqa without a mask, and torch < 2.14's memory-efficient "
            "kernel takes only equal head counts where flash cannot run; torch 2.14, a masked batch "
            "(repeat_kv) or flex_attention keeps these layers off math"
        )
    if "not a multiple of" in refusals or "differ" in refusals:
        why = x.refused.get("efficient", refusals)
        return f"{head}: no fused kernel takes head_dim {x.head_dim} here ({why})"
    if "bf16 below sm80" in refusals:
        return f"{head}: bf16 runs no fused kernel below sm80; fp16 does"
    return f"{head} (every fused kernel refused: {refusals})"


def advise(shape: ModelShape, ctx: Context, layers: list[LayerExplanation]) -> list[str]:
    """Concrete next steps, from what the layers get."""
    out: list[str] = []
    no_flex = ctx.training and ctx.sdpa_dropout > 0  # transformers' flex raises on dropout
    dense_sliding = [
        x
        for x in layers
        if x.layer_type == "sliding" and x.mask_materialised and ctx.attn != "flex_attention"
    ]
    # flex's options for this card (None: no block size fits it; "": no card, nothing to size)
    from tuneproof.attention.flex_advice import flex_options

    picked, why = flex_options(layers, ctx) if ctx.capability is not None and layers else ("", "")
    if ctx.attn == "flex_attention" and no_flex:
        fix = "set attention_dropout to 0 or use sdpa"
        out.append(f"flex_attention cannot run this training step: {FLEX_DROPOUT}; {fix}")
    elif ctx.attn == "flex_attention" and picked != "":
        out.append(
            f"flex_attention: pass kernel_options {picked} ({why})"
            if picked
            else f"flex_attention cannot run on this card ({why}): use another attention backend"
        )
    if dense_sliding:
        opts = f" with kernel_options {picked} ({why})" if picked else ""
        where = " on a CUDA device (it has no backward on the CPU)" if _flex_training_on_cpu(ctx) else ""
        square = f"the sliding layers compute the full {ctx.seq_len}x{ctx.seq_len} square today"
        if no_flex:
            skip = "flex_attention would skip the blocks outside the window"
            out.append(f"{square}; {skip}, but {FLEX_DROPOUT}: set attention_dropout to 0 first")
        elif picked is None:
            skip = "flex_attention would skip the blocks outside the window"
            out.append(f"{square}; {skip}, but cannot run on this card ({why})")
        else:
            out.append(f"{FLEX_ADVICE}{opts}{where}: {square}; flex skips the blocks outside the window")
    masked_full = [x for x in layers if x.layer_type == "full" and x.mask_materialised]
    kept_off_math = [x for x in masked_full if _unpadded_falls_to_math(shape, ctx, x)]
    if ctx.padded and masked_full and not kept_off_math:
        which = "the global layers" if any(x.layer_type != "full" for x in layers) else "the layers"
        regain = "regain is_causal and skip half the square"
        if ctx.compiled:
            regain = "would regain is_causal, but not under torch.compile, which masks every layer"
        out.append(f"{BUCKET_ADVICE} (sequences of one length per micro-batch): {which} {regain}")
    for x in kept_off_math:
        out.append(
            f"do not bucket the {x.layer_type} layers off their mask: without it transformers passes "
            "enable_gqa, and torch < 2.14's memory-efficient kernel takes only equal head counts, so they "
            "would fall to math; the mask's repeat_kv is what keeps them on the memory-efficient kernel"
        )
    if ctx.attn == "sdpa":
        out.extend(_math_advice(ctx, x) for x in layers if x.backend == "math")
    for x in layers:
        if x.backend != "efficient" or x.head_dim <= 128:
            continue
        flex = (
            "flex_attention is the path that compiles for this card"
            if picked is not None
            else "nor can flex_attention on this card (its shared memory)"
        )
        spec = _spec_of(shape, x)
        flash = (
            f"flash needs equal head_dims (q/k {spec.head_dim}, v {spec.v_head_dim})"
            if spec is not None and spec.head_dim != spec.v_head_dim
            else "flash cannot take head_dim > 256 at all"
            if x.head_dim > 256
            else "flash refuses it here"
        )
        out.append(
            f"head_dim {x.head_dim} > 128 on the memory-efficient backend runs its gmem tier, the slowest; "
            f"{flash}: {flex}"
        )
        break
    gqa_masked = [x for x in layers if x.mask_materialised and x.num_kv_heads != x.num_heads]
    if ctx.attn == "sdpa" and ctx.capability is not None and gqa_masked and not kept_off_math:
        out.append(
            "with a mask, transformers also expands K/V with repeat_kv (use_gqa_in_sdpa is False): "
            "memory traffic grows by num_heads/num_kv_heads"
        )
    return out
