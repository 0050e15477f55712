"""`tuneproof attractors mine` as two library calls: `prepare(spec)` checks the out file and reads the
reference and the outputs; `run(plan)` ranks the phrases (`attractors.mine`), writes them one per line to
`out` when one is given and something stood out, and returns a `MiningResult` (nothing is judged)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuneproof.core import validate
from tuneproof.core.progress import Progress
from tuneproof.core.terminal import plain

if TYPE_CHECKING:
    from rich.console import Console

    from tuneproof.gate.arms import Arm
    from tuneproof.gate.attractors import MinedPhrase


MIN_REFERENCE_WORDS = 1000  # below this, over-representation against the reference is weak evidence
REFERENCE_HINT = "pass a human-written UTF-8 text file (or .gz)"


@dataclass(kw_only=True, frozen=True, slots=True)
class MiningSpec:
    outputs: tuple[Path, ...]  # arm files of model outputs
    reference: Path  # human-written reference text
    top: int = 50  # how many phrases to keep
    out: Path | None = None  # write the phrases here, one per line

    def __post_init__(self) -> None:
        validate.integer("top", self.top, low=1, high=100_000)


@dataclass(kw_only=True, frozen=True, slots=True)
class MiningPlan:
    spec: MiningSpec
    arm: Arm
    reference: str
    warnings: list[str] = field(default_factory=list)


@dataclass(kw_only=True, frozen=True, slots=True)
class MiningResult:
    phrases: list[MinedPhrase]
    out: Path | None
    warnings: list[str] = field(default_factory=list)
    verdict: None = None

    def to_dict(self) -> dict[str, Any]:
        return {"phrases": [m.to_dict() for m in self.phrases], "out": str(self.out) if self.out else None}

    def render(self, console: Any) -> None:

        render_mined(self, console)


def prepare(spec: MiningSpec) -> MiningPlan:
    from tuneproof.core.io import check_out_file
    from tuneproof.gate.arms import read_arm
    from tuneproof.gate.inputs import read_text

    if spec.out is not None:
        check_out_file(spec.out, (*spec.outputs, spec.reference))
    text = read_text(spec.reference, "the reference", REFERENCE_HINT)
    arm = read_arm(spec.outputs, "outputs")
    words = len(text.split())
    warnings = []
    if words < MIN_REFERENCE_WORDS:
        warnings.append(
            f"the reference holds {words} words: over-representation against so little human text is weak "
            f"evidence (give {MIN_REFERENCE_WORDS:,} words or more)"
        )
    return MiningPlan(spec=spec, arm=arm, reference=text, warnings=warnings)


def run(plan: MiningPlan, progress: Progress | None = None) -> MiningResult:
    """Mine the arm against the reference (quick: no progress to report) and write --out if asked."""
    from tuneproof.gate.attractors import mine

    out = plan.spec.out
    phrases = mine(plan.arm, plan.reference, plan.spec.top)
    warnings = list(plan.warnings)
    if out is not None and not phrases:
        warnings.append(f"no phrase is over-represented under >= 2 prompts: {out} was not written")
    elif out is not None:
        from tuneproof.core.io import atomic_write_text

        atomic_write_text(out, "".join(m.phrase + "\n" for m in phrases))
    return MiningResult(phrases=phrases, out=out, warnings=warnings)


def render_mined(result: MiningResult, console: Console) -> None:
    """One line per phrase: its z score, its count in the outputs vs the reference, under how many prompts."""
    if not result.phrases:
        plain(console, "no phrase is over-represented under >= 2 prompts")
    for m in result.phrases:
        counts = f"{m.count:6d} vs {m.reference_count:<6d} ({m.num_prompts} prompts)"
        plain(console, f"{m.z:7.2f}  {counts}  {m.phrase}")
