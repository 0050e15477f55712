"""`tuneproof explain`: which attention backend each layer type gets and why (`attention.dispatch.explain`),
for the card the context names. An `ExplainSpec` (the model and the dispatch `Context`), `prepare(spec)`
notes a width over the model's positions, `run` explains."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tuneproof.arch import ResolvedModel, resolve
from tuneproof.arch.shape import ModelShape
from tuneproof.arch.small import SmallCopy
from tuneproof.attention.dispatch import LIVE_HINT, Context, Explanation, explain
from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress
from tuneproof.core.verdict import CANNOT_JUDGE

__all__ = ["Context", "ExplainPlan", "ExplainSpec", "prepare", "run"]


@dataclass(kw_only=True, frozen=True, slots=True)
class ExplainSpec:
    """What to explain: `context` (the batch, path, dtype, training flag and card, checked on
    construction) on `model`: a config ("tiny", a config.json or its folder, a hub id in the local
    cache) read by `prepare`, or a model already resolved (`tuneproof.resolve`)."""

    model: str | Path | ResolvedModel = "tiny"
    context: Context
    live: bool = False  # with a packed context: run the isolation check on a small copy of the model

    def __post_init__(self) -> None:
        if self.live and not self.context.packed:
            raise TuneproofError(
                "{live} checks packed documents, and the batch is not packed",
                "add {packed} or drop {live}",
                fields=("live", "packed"),
            )


@dataclass(kw_only=True, frozen=True, slots=True)
class ExplainPlan:
    """What `run` explains: a model's shape under a context, and the notes found on the way in."""

    shape: ModelShape
    context: Context
    notes: tuple[str, ...] = ()
    live: ResolvedModel | None = None  # the model to build for the isolation check
    name: str = ""  # the model explained, as the user named it


def prepare(spec: ExplainSpec) -> ExplainPlan:
    """The plan for `tuneproof explain`; a width over the model's positions is noted, not refused
    (the explanation is of the dispatch, which does not depend on the positions)."""
    model, ctx = resolve(spec.model), spec.context
    if spec.live and ctx.attn in model.shape.attn_refused:
        raise TuneproofError(
            f"transformers will not run {ctx.attn} for {model.shape.model_type}, so there is nothing live to "
            f"check: {model.shape.attn_refused[ctx.attn]}",
            "pick the path the run uses with {attn}: eager or flex_attention",
            fields=("attn",),
        )
    if spec.live and ctx.attn == "flash_attention_2":
        _flash_here()
    if ctx.dropout is None:  # SDPA gets the config's attention_dropout in training (read only then)
        ctx = replace(ctx, dropout=model.attention_dropout if ctx.training else 0.0)
    problem = model.positions_problem(ctx.seq_len, "seq_len")
    return ExplainPlan(
        shape=model.shape,
        context=ctx,
        notes=(problem,) if problem else (),
        live=model if spec.live else None,
        name=model.name,
    )


def run(plan: ExplainPlan, progress: Progress | None = None) -> Explanation:
    """Explain the plan's model; with `live`, also run the isolation check (seconds on a CPU)."""
    result = explain(plan.shape, plan.context)
    result.notes.extend(plan.notes)
    if plan.context.training:
        result.notes.extend(_memory_notes(plan.shape, plan.context, result))
    result.model = plan.name
    if plan.live is not None:
        result.isolation = live_isolation(plan.live, plan.context.attn)
        result.notes[:] = [n.replace(LIVE_HINT, "") for n in result.notes]
    return result


def _memory_notes(shape: Any, ctx: Any, result: Explanation) -> list[str]:
    """What each attention group keeps for backward on its backend, against a fused kernel's
    (`tuneproof.memory.activations`: eager and math keep the B x H x T x T probabilities)."""
    from tuneproof.core.dtypes import BY_SHORT
    from tuneproof.memory.activations import Geometry, attention_items
    from tuneproof.memory.report import gib

    run = ctx.step
    notes = []
    for x, idxs in zip(result.layers, shape.attention_groups.values(), strict=False):
        layer = shape.layers[idxs[0]]

        def kept(backend: str, masked: bool, layer: Any = layer) -> int:
            g = Geometry(batch=ctx.batch, width=ctx.seq_len, act_bytes=BY_SHORT[ctx.dtype].bytes, run=run,
                         backends={layer.index: backend}, masked={layer.index: masked}, input_grads=True,
                         dropout=ctx.sdpa_dropout)  # fmt: skip
            return sum(i.nbytes for i in attention_items(layer, g))

        performed, fused = kept(x.backend, x.mask_materialised), kept("flash", False)
        if performed > fused:
            notes.append(
                f"memory: each {x.layer_type} layer keeps {gib(performed)} for backward on {x.backend} "
                f"(a fused kernel: {gib(fused)}); 'tuneproof memory' sizes the whole step"
            )
    return notes


def _flash_here() -> None:
    """flash_attention_2 runs only with the flash-attn package on a CUDA device: the live check
    cannot judge it elsewhere (exit 3, before any model is built)."""
    import torch
    from transformers.utils import is_flash_attn_2_available

    if not (torch.cuda.is_available() and is_flash_attn_2_available()):
        raise TuneproofError(
            "flash_attention_2 needs the flash-attn package and a CUDA device, and this machine has "
            + ("neither" if not torch.cuda.is_available() else "no flash-attn"),
            "run the live check where the run runs, or check the path's rule without {live}",
            exit_code=CANNOT_JUDGE,
            fields=("live",),
        )


LIVE_DOCS = (72, 120, 64)  # three documents of unequal length, 256 tokens in one row


def live_isolation(model: ResolvedModel, attn: str) -> dict[str, object]:
    """Build a small copy of `model` (`tuneproof.arch.small`: every layer kind and window it has,
    narrow widths, random weights, seeded) on `attn` and run one packed row of LIVE_DOCS through it,
    packed and each document alone (`tuneproof.attention.isolation.check_isolation`)."""
    from transformers.utils import logging as hf_logging

    from tuneproof.attention.isolation import check_isolation

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # kernels "falling back to PyTorch": the check runs on the CPU
    try:
        built, small, problem = _build_small(model, attn)
        if built is None or small is None:
            raise TuneproofError(
                f"a small copy of this {model.shape.model_type} config cannot be built ({problem})",
                "explain a small config of the same family, or drop {live}",
                fields=("live",),
            )
        out = check_isolation(built, LIVE_DOCS).as_dict()
    finally:
        hf_logging.set_verbosity(verbosity)
    out["model"] = f"{small.what}; run in fp32 on this machine's CPU (the masks do not depend on the dtype)"
    return out


def _build_small(model: ResolvedModel, attn: str) -> tuple[Any, SmallCopy | None, str]:
    """The model built from its small copy on `attn`: narrow widths first, then, where the family
    ties its widths together, its own widths. (model or None, the copy, why it could not be built)."""
    from tuneproof.arch.small import small_copy
    from tuneproof.measure.model import build_model

    small, problem = None, ""
    for narrow in (True, False):  # narrow widths first; a config whose widths are tied keeps its own
        small = small_copy(model, narrow=narrow)
        try:
            small_model = resolve(small.config)
        except TuneproofError as e:
            problem = e.message
            continue
        try:
            return build_model(small_model, attn), small, ""
        except TuneproofError:
            raise  # transformers refuses the attention path itself: no width changes that
        except ImportError as e:  # the path's package is not installed here: no width changes that
            raise TuneproofError(
                f"{attn} cannot be loaded here ({str(e).splitlines()[0] if str(e) else 'ImportError'})",
                "run the live check where the run runs, or check the path's rule without {live}",
                exit_code=CANNOT_JUDGE,
                fields=("live",),
            ) from None
        except Exception as e:  # a family whose config the narrowing does not fit
            problem = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None, small, problem
