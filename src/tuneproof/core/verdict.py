"""The one verdict type: what every judging step returns (an adapter's health, a gate metric, a base's
identity, a fit's term), as data, so that the library and the command can never tell different stories.

A verdict carries its outcome (a word from the judging area's table: HEALTHY, PASS, INCONCLUSIVE, ...),
the reason in one sentence, the exit code a command ends with, and, where the verdict compares a number
against noise, the margin and the noise it was judged against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

# exit codes every command shares: 0 the good outcome, 1 the bad one, 2 a usage error, 3 cannot judge
OK, FINDING, USAGE, CANNOT_JUDGE = 0, 1, 2, 3


@dataclass(kw_only=True, frozen=True, slots=True)
class Verdict:
    outcome: str
    reason: str
    exit_code: int = OK
    margin: float | None = None  # the judged number's distance from the line it was held against
    noise: float | None = None  # the noise floor (or interval half-width) it was judged against

    def __str__(self) -> str:
        return f"{self.outcome}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "margin": self.margin,
            "noise": self.noise,
        }


class Result(Protocol):
    """What every area's `run(plan, progress)` returns, and all a command needs from it:
    `to_dict()` is exactly what `--json` prints, `render(console)` the text, `warnings` what goes to
    stderr after success, and `verdict` (None where nothing is judged) the exit code."""

    @property
    def warnings(self) -> list[str]: ...

    @property
    def verdict(self) -> Verdict | None: ...

    def to_dict(self) -> dict[str, Any]: ...

    def render(self, console: Any) -> None: ...


class NoWarnings:
    """For a Result that warns of nothing (its notes are part of its text): `warnings` is empty."""

    __slots__ = ()

    @property
    def warnings(self) -> list[str]:
        return []


class Unjudged(NoWarnings):
    """For a Result that judges nothing: no verdict, so the command exits 0."""

    __slots__ = ()

    @property
    def verdict(self) -> None:
        return None


def counted(n: int, about: str, clean: str) -> Verdict:
    """FINDINGS (exit 1) with `n` findings `about` what ("before launch"), or CLEAN with `clean`."""
    if n:
        return Verdict(outcome="FINDINGS", reason=f"{n} finding{'s' * (n != 1)} {about}", exit_code=FINDING)
    return Verdict(outcome="CLEAN", reason=clean, exit_code=OK)
