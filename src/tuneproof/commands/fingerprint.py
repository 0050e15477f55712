"""`tuneproof fingerprint`: a model folder's per-tensor sha256 (`identity.fingerprint`), streamed shard by
shard, optionally written where a merge will check the base against it; with `compare`, two folders (or
fingerprint files) side by side: which tensors differ and how (`identity.characterise`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress, mib_steps
from tuneproof.core.terminal import gib
from tuneproof.core.verdict import Verdict
from tuneproof.ship.comparison import NOT_CHARACTERISED, FingerprintComparison, Side
from tuneproof.ship.identity import (
    Fingerprint,
    characterise,
    diff_fingerprints,
    fingerprint,
    read_fingerprint,
)
from tuneproof.ship.tensors import Checkpoint, open_checkpoint


@dataclass(kw_only=True, frozen=True, slots=True)
class FingerprintSpec:
    """A folder to fingerprint (`model_dir`, written to `out` if given), or two to compare (`compare`)."""

    model_dir: Path | None = None
    out: Path | None = None  # where to write the fingerprint JSON; an existing file is refused
    compare: tuple[Path, Path] | None = None

    def __post_init__(self) -> None:
        if self.compare and (self.model_dir is not None or self.out is not None):
            raise TuneproofError(
                "{compare} takes its two folders alone",
                "drop {model_dir} and {out}, or drop {compare}",
                fields=("compare", "model_dir", "out"),
            )
        if not self.compare and self.model_dir is None:
            raise TuneproofError(
                "no model folder given", "pass {model_dir}, or {compare} A B", fields=("model_dir", "compare")
            )


@dataclass(frozen=True, slots=True)
class RecordPlan:
    checkpoint: Checkpoint
    source: Path  # the folder as given: the fingerprint's `source`
    out: Path | None


@dataclass(kw_only=True, frozen=True, slots=True)
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


def prepare(spec: FingerprintSpec) -> RecordPlan | ComparePlan:
    """Every header read and checked before any hashing. To record: an `out` that exists (a recorded
    fingerprint is never overwritten), cannot be written or is one of the model's files, refused. To
    compare: both sides opened, a fingerprint file read and its digest checked, a folder's headers read."""
    if spec.compare:
        return ComparePlan(_side(Path(spec.compare[0])), _side(Path(spec.compare[1])))
    assert spec.model_dir is not None  # the spec refuses neither
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


def run(plan: RecordPlan | ComparePlan, progress: Progress | None = None) -> Recorded | FingerprintComparison:
    """Hash every tensor (progress phase 'hashing MiB') and write the JSON to `plan.out` atomically; or
    compare (`compare`)."""
    from tuneproof.core.io import atomic_write_json

    if isinstance(plan, ComparePlan):
        return _compare(plan, progress)
    taken = fingerprint(plan.checkpoint, mib_steps(progress, "hashing MiB", plan.checkpoint.nbytes))
    result = Fingerprint(
        digest=taken.digest, tensors=taken.tensors, total_bytes=taken.total_bytes, source=str(plan.source)
    )
    if plan.out is not None:
        atomic_write_json(plan.out, result.to_json())
    return Recorded(fingerprint=result, out=plan.out)


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


@dataclass(frozen=True, slots=True)
class ComparePlan:
    a: Side
    b: Side


def _side(path: Path) -> Side:
    if path.is_file() and path.suffix == ".json":
        return Side(path, recorded=read_fingerprint(path))
    return Side(path, checkpoint=open_checkpoint(path))


def _digests(side: Side, progress: Progress | None) -> Fingerprint:
    if side.recorded is not None:
        return side.recorded
    assert side.checkpoint is not None
    step = mib_steps(progress, f"hashing {side.path.name} MiB", side.checkpoint.nbytes)
    return fingerprint(side.checkpoint, step)


def _compare(plan: ComparePlan, progress: Progress | None = None) -> FingerprintComparison:
    """Hash each folder (progress phase 'hashing NAME MiB'), name the differing tensors and, when both
    sides are folders, characterise the tensors of the same shape that differ."""
    a, b = plan.a, plan.b
    diff = diff_fingerprints(_digests(a, progress), _digests(b, progress))
    charac, why_not = None, None
    if diff.comparable and a.checkpoint is not None and b.checkpoint is not None:
        charac = characterise(a.checkpoint, b.checkpoint, diff.comparable)
    elif diff.comparable:
        why_not = NOT_CHARACTERISED
    return FingerprintComparison(
        a=str(a.path), b=str(b.path), difference=diff, characterisation=charac, why_not=why_not
    )
