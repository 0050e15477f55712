"""`tuneproof explain`: which attention backend each layer type gets and why (`attention.dispatch.explain`),
for the card the context names. An `ExplainSpec` (the model and the dispatch `Context`), `prepare(spec)`
notes a width over the model's positions, `run` explains."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuneproof.arch import ResolvedModel, resolve
from tuneproof.arch.shape import ModelShape
from tuneproof.attention.dispatch import Context, Explanation, explain
from tuneproof.core.progress import Progress

__all__ = ["Context", "ExplainPlan", "ExplainSpec", "prepare", "run"]


@dataclass(kw_only=True, frozen=True, slots=True)
class ExplainSpec:
    """What to explain: `context` (the batch, path, dtype, training flag and card, checked on
    construction) on `model`: a config ("tiny", a config.json or its folder, a hub id in the local
    cache) read by `prepare`, or a model already resolved (`tuneproof.resolve`)."""

    model: str | Path | ResolvedModel = "tiny"
    context: Context


@dataclass(frozen=True, slots=True)
class ExplainPlan:
    """What `run` explains: a model's shape under a context, and the notes found on the way in."""

    shape: ModelShape
    context: Context
    notes: tuple[str, ...] = ()


def prepare(spec: ExplainSpec) -> ExplainPlan:
    """The plan for `tuneproof explain`; a width over the model's positions is noted, not refused
    (the explanation is of the dispatch, which does not depend on the positions)."""
    model, ctx = resolve(spec.model), spec.context
    problem = model.positions_problem(ctx.seq_len, "seq_len")
    return ExplainPlan(model.shape, ctx, (problem,) if problem else ())


def run(plan: ExplainPlan, progress: Progress | None = None) -> Explanation:
    """Explain the plan's model (quick: no progress to report)."""
    result = explain(plan.shape, plan.context)
    result.notes.extend(plan.notes)
    return result
