"""Streaming LoRA merge: W + scaling * B @ A written shard by shard, without loading the base as a model.

Three phases, a module each: `merge_plan` (every refusal, before any weight is read), `merge_identity`
(the base's fingerprint against the one recorded next to the adapter: a different base is refused
unless the mismatch is allowed) and `merge_write` (each adapted tensor merged in fp32 and cast once,
everything else copied as bytes, into a temporary folder renamed into place at the end). This module
is the front door: `prepare(spec)`, `run(plan, progress=...)`, and `merge_adapter` for both at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuneproof.ship.merge_identity import Identity, identity, judge_identity
from tuneproof.ship.merge_plan import MERGE_DTYPES, MergePlan, check_out, plan, stale_partials
from tuneproof.ship.merge_write import RECORD_NAME, MergeResult, write
from tuneproof.ship.progress import Progress, mib_steps

__all__ = [
    "MERGE_DTYPES",
    "RECORD_NAME",
    "Identity",
    "MergePlan",
    "MergeResult",
    "MergeSpec",
    "check_out",
    "identity",
    "judge_identity",
    "merge_adapter",
    "plan",
    "prepare",
    "run",
    "stale_partials",
]


@dataclass(kw_only=True, frozen=True, slots=True)
class MergeSpec:
    base: Path
    adapter_dir: Path
    out: Path  # a new folder; an existing one is refused
    dtype: str | None = None  # a MERGE_DTYPES key for every float tensor; None: each keeps its own
    allow_base_mismatch: bool = False  # merge onto a base that is not the recorded one, loudly


def prepare(spec: MergeSpec) -> MergePlan:
    """Everything checked that can be checked without reading the weights (`merge_plan.plan`)."""
    return plan(spec.base, spec.adapter_dir, spec.out, spec.dtype, spec.allow_base_mismatch)


def run(
    merge_plan: MergePlan,
    ident: Identity | None = None,
    progress: Progress | None = None,
    identity_warnings: list[str] | None = None,
) -> MergeResult:
    """Check the base's identity (progress phase 'checking base identity, MiB'), refusing a base that
    is not the recorded one unless the plan allows it, then write the merged model ('merging MiB').
    A caller that checked the identity itself passes `ident` and the warnings `judge_identity`
    returned. The result's `warnings` are every one the command prints."""
    total = merge_plan.base.nbytes
    folder = merge_plan.adapter.folder
    if ident is None:
        ident = identity(merge_plan.base, folder, mib_steps(progress, "checking base identity, MiB", total))
        identity_warnings = judge_identity(ident, merge_plan.allow_base_mismatch, folder)
    return write(merge_plan, ident, mib_steps(progress, "merging MiB", total), identity_warnings)


def merge_adapter(
    base: Path,
    adapter_dir: Path,
    out: Path,
    dtype: str | None = None,
    allow_base_mismatch: bool = False,
    progress: Progress | None = None,
) -> MergeResult:
    """Check everything, check the base's identity, then write the merged model to `out`."""
    return run(
        prepare(
            MergeSpec(
                base=base,
                adapter_dir=adapter_dir,
                out=out,
                dtype=dtype,
                allow_base_mismatch=allow_base_mismatch,
            )
        ),
        progress=progress,
    )
