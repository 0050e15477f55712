"""`tuneproof explain`: which attention backend each layer type gets and why (`attention.dispatch.explain`),
for the card the context names. The `Context` is the spec; `prepare(ctx, model)` notes a width over the
model's positions, `run` explains."""

from __future__ import annotations

from dataclasses import dataclass

from tuneproof.arch import ResolvedModel
from tuneproof.arch.shape import ModelShape
from tuneproof.attention.dispatch import Context, Explanation, explain
from tuneproof.core.progress import Progress

__all__ = ["Context", "ExplainPlan", "prepare", "run"]


@dataclass(frozen=True, slots=True)
class ExplainPlan:
    """What `run` explains: a model's shape under a context, and the notes found on the way in."""

    shape: ModelShape
    context: Context
    notes: tuple[str, ...] = ()


def prepare(ctx: Context, model: ResolvedModel) -> ExplainPlan:
    """The plan for `tuneproof explain`; a width over the model's positions is noted, not refused
    (the explanation is of the dispatch, which does not depend on the positions)."""
    problem = model.positions_problem(ctx.seq_len, "seq_len")
    return ExplainPlan(model.shape, ctx, (problem,) if problem else ())


def run(plan: ExplainPlan, progress: Progress | None = None) -> Explanation:
    """Explain the plan's model (quick: no progress to report)."""
    result = explain(plan.shape, plan.context)
    result.notes.extend(plan.notes)
    return result
