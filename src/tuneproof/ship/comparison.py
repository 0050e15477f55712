"""`tuneproof fingerprint --compare A B`: which tensors of two models differ, and what the difference is
(`identity.characterise`: the rank of each change, one direction shared across layers or not).

Either side may be a model folder (hashed shard by shard) or a fingerprint file (digests only: a
difference is then named, never characterised, since a file holds no weights)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.core.verdict import FINDING, Verdict
from tuneproof.ship.identity import (
    Characterisation,
    Difference,
    Fingerprint,
    characterise,
    diff_fingerprints,
    fingerprint,
    read_fingerprint,
)
from tuneproof.ship.progress import Progress, mib_steps
from tuneproof.ship.tensors import Checkpoint, open_checkpoint

NOT_CHARACTERISED = (
    "not characterised: a fingerprint file holds digests, not weights (compare two model folders)"
)


@dataclass(kw_only=True, frozen=True, slots=True)
class CompareSpec:
    a: Path
    b: Path


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a comparison: a fingerprint file read and checked, or a model folder's headers."""

    path: Path
    recorded: Fingerprint | None = None
    checkpoint: Checkpoint | None = None


@dataclass(frozen=True, slots=True)
class ComparePlan:
    a: Side
    b: Side


@dataclass(frozen=True, slots=True)
class FingerprintComparison:
    a: str
    b: str
    difference: Difference
    characterisation: Characterisation | None = None
    why_not: str | None = None  # why a difference of same-shaped tensors was not characterised
    warnings: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        """IDENTICAL (exit 0) or DIFFERENT (exit 1)."""
        d = self.difference
        if d.identical:
            return Verdict("IDENTICAL", "every tensor has the same dtype, shape and bytes")
        return Verdict("DIFFERENT", f"{d.num_differing} tensors differ", FINDING)

    def to_dict(self) -> dict[str, Any]:
        """Exactly what `tuneproof fingerprint --compare A B --json` prints."""
        from tuneproof.ship.render import comparison_json

        return comparison_json(self)

    def render(self, console: Any) -> None:
        from tuneproof.ship.render import comparison_lines, print_lines

        print_lines(console, comparison_lines(self))


def _side(path: Path) -> Side:
    if path.is_file() and path.suffix == ".json":
        return Side(path, recorded=read_fingerprint(path))
    return Side(path, checkpoint=open_checkpoint(path))


def prepare(spec: CompareSpec) -> ComparePlan:
    """Both sides opened before either is hashed: a fingerprint file read and its digest checked, a
    folder's headers read."""
    return ComparePlan(_side(Path(spec.a)), _side(Path(spec.b)))


def _digests(side: Side, progress: Progress | None) -> Fingerprint:
    if side.recorded is not None:
        return side.recorded
    assert side.checkpoint is not None
    step = mib_steps(progress, f"hashing {side.path.name} MiB", side.checkpoint.nbytes)
    return fingerprint(side.checkpoint, step)


def run(plan: ComparePlan, progress: Progress | None = None) -> FingerprintComparison:
    """Hash each folder (progress phase 'hashing NAME MiB'), name the differing tensors and, when both
    sides are folders, characterise the tensors of the same shape that differ."""
    a, b = plan.a, plan.b
    diff = diff_fingerprints(_digests(a, progress), _digests(b, progress))
    charac, why_not = None, None
    if diff.comparable and a.checkpoint is not None and b.checkpoint is not None:
        charac = characterise(a.checkpoint, b.checkpoint, diff.comparable)
    elif diff.comparable:
        why_not = NOT_CHARACTERISED
    return FingerprintComparison(str(a.path), str(b.path), diff, charac, why_not)
