"""What `tuneproof fingerprint --compare A B` finds (`tuneproof.commands.fingerprint`): which tensors of
two models differ, and what the difference is (`identity.characterise`: the rank of each change, one
direction shared across layers or not).

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
)
from tuneproof.ship.tensors import Checkpoint

NOT_CHARACTERISED = (
    "not characterised: a fingerprint file holds digests, not weights (compare two model folders)"
)


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a comparison: a fingerprint file read and checked, or a model folder's headers."""

    path: Path
    recorded: Fingerprint | None = None
    checkpoint: Checkpoint | None = None


@dataclass(kw_only=True, frozen=True, slots=True)
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
            return Verdict(outcome="IDENTICAL", reason="every tensor has the same dtype, shape and bytes")
        return Verdict(outcome="DIFFERENT", reason=f"{d.num_differing} tensors differ", exit_code=FINDING)

    def to_dict(self) -> dict[str, Any]:
        """Exactly what `tuneproof fingerprint --compare A B --json` prints."""
        from tuneproof.ship.render import comparison_json

        return comparison_json(self)

    def render(self, console: Any) -> None:
        from tuneproof.ship.render import comparison_lines, print_lines

        print_lines(console, comparison_lines(self))
