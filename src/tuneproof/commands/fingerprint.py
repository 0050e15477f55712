"""`tuneproof fingerprint MODEL_DIR`: record a base's fingerprint (`identity.fingerprint`), streamed shard
by shard, optionally written where a merge will check the base against it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.core.terminal import gib
from tuneproof.core.verdict import Verdict
from tuneproof.ship.identity import Fingerprint, fingerprint
from tuneproof.ship.progress import Progress, mib_steps
from tuneproof.ship.tensors import Checkpoint, open_checkpoint


@dataclass(kw_only=True, frozen=True, slots=True)
class RecordSpec:
    model_dir: Path
    out: Path | None = None  # where to write the fingerprint JSON; an existing file is refused


@dataclass(frozen=True, slots=True)
class RecordPlan:
    checkpoint: Checkpoint
    source: Path  # the folder as given: the fingerprint's `source`
    out: Path | None


@dataclass(frozen=True, slots=True)
class Recorded:
    """A fingerprint taken, and where it was written (None: nowhere). Nothing is judged."""

    fingerprint: Fingerprint
    out: Path | None = None
    warnings: list[str] = field(default_factory=list)
    verdict: Verdict | None = None

    def to_dict(self) -> dict[str, Any]:
        """Exactly what `tuneproof fingerprint --json` prints: the file's JSON and `out`."""
        return recorded_json(self)

    def render(self, console: Any) -> None:
        from tuneproof.ship.render import print_lines

        print_lines(console, recorded_lines(self))


def prepare(spec: RecordSpec) -> RecordPlan:
    """Every header read and checked; an `out` that exists (a recorded fingerprint is never
    overwritten), cannot be written or is one of the model's files, refused before any hashing."""
    checkpoint = open_checkpoint(spec.model_dir)
    out = spec.out
    if out is not None:
        from tuneproof.core.io import check_out_file

        if out.is_file():
            raise TuneproofError(
                f"{out} exists: a recorded fingerprint is never overwritten (a merge checks against it)",
                "remove it first if you mean to replace it, or pass another path",
            )
        check_out_file(out, tuple(s.path for s in checkpoint.shards))
    return RecordPlan(checkpoint, Path(spec.model_dir), out)


def run(plan: RecordPlan, progress: Progress | None = None) -> Recorded:
    """Hash every tensor (progress phase 'hashing MiB') and write the JSON to `plan.out` atomically."""
    from tuneproof.core.io import atomic_write_json

    taken = fingerprint(plan.checkpoint, mib_steps(progress, "hashing MiB", plan.checkpoint.nbytes))
    result = Fingerprint(taken.digest, taken.tensors, taken.total_bytes, str(plan.source))
    if plan.out is not None:
        atomic_write_json(plan.out, result.to_json())
    return Recorded(result, plan.out)


def recorded_lines(r: Recorded) -> list[str]:
    fp = r.fingerprint
    return [
        f"model     {fp.source}",
        f"tensors   {len(fp.tensors):,} ({gib(fp.total_bytes)}), each sha256 over its raw bytes "
        "with dtype and shape",
        f"digest    sha256:{fp.digest}",
    ] + ([f"written   {r.out}"] if r.out else [])


def recorded_json(r: Recorded) -> dict[str, Any]:
    data = r.fingerprint.to_json()
    data["out"] = str(r.out) if r.out else None
    return data
