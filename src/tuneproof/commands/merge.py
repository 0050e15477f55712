"""`tuneproof merge`: a streaming LoRA merge, W + scaling * B @ A written shard by shard, without loading the
base as a model. A `MergeSpec` (base, adapter, out, dtype), `prepare` (every refusal, before any weight is
read: `ship.merge_plan`) and `run`: one pass over the base (`ship.stream`: reading, merging and writing
overlap) that merges each adapted tensor in fp32 and rounds it once, copies everything else as bytes, and
hashes what it reads against the fingerprint recorded next to the adapter (`ship.merge_identity`: a
different base is refused unless the mismatch is allowed), into a temporary folder renamed into place at
the end (`ship.merge_write`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress, mib_steps
from tuneproof.ship.merge_identity import (
    BaseDiffers,
    Identity,
    IdentityCheck,
    identity,
    identity_check,
    judge_identity,
)
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
    t = time.perf_counter()
    merge_plan = plan(spec.base, spec.adapter_dir, spec.out, spec.dtype, spec.allow_base_mismatch)
    merge_plan.seconds = time.perf_counter() - t
    return merge_plan


def run(
    merge_plan: MergePlan,
    progress: Progress | None = None,
    *,
    ident: Identity | None = None,
    identity_warnings: list[str] | None = None,
) -> MergeResult:
    """Merge, checking the base's identity from the very bytes the merge reads: each tensor's sha256
    against the one recorded next to the adapter, the merge stopped at the first that differs. A base
    that is not the recorded one is then refused, naming the tensors and what the change looks like
    (progress phase 'checking base identity, MiB'), unless the plan allows it. A caller that checked the
    identity itself passes `ident` and the warnings `judge_identity` returned. Progress phase:
    'merging MiB'. The result's `warnings` are every one the command prints."""
    base, folder, allow = merge_plan.base, merge_plan.adapter.folder, merge_plan.allow_base_mismatch
    checking = mib_steps(progress, "checking base identity, MiB", base.nbytes)
    if ident is not None:
        check = IdentityCheck(
            adapter_dir=folder, allow_mismatch=allow, known=ident, warnings=list(identity_warnings or [])
        )
    else:
        check = identity_check(base, folder, allow, checking)
    try:
        return write(merge_plan, check, mib_steps(progress, "merging MiB", base.nbytes))
    except BaseDiffers:
        judge_identity(identity(base, folder, checking), allow, folder)  # refused here, with the details
        raise TuneproofError(
            "the base changed while the merge read it", "merge again once nothing writes to the base"
        ) from None
