"""`tuneproof merge`: a streaming LoRA merge, W + scaling * B @ A written shard by shard, without loading the
base as a model. A `MergeSpec` (base, adapter, out, dtype), `prepare` (every refusal, before any weight is
read: `ship.merge_plan`) and `run`: the base's fingerprint against the one recorded next to the adapter
(`ship.merge_identity`: a different base is refused unless the mismatch is allowed), then each adapted
tensor merged in fp32 and cast once, everything else copied as bytes, into a temporary folder renamed
into place at the end (`ship.merge_write`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuneproof.core.progress import Progress, mib_steps
from tuneproof.ship.merge_identity import Identity, identity, judge_identity
from tuneproof.ship.merge_plan import MergePlan, plan
from tuneproof.ship.merge_write import MergeResult, write


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
    progress: Progress | None = None,
    *,
    ident: Identity | None = None,
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
