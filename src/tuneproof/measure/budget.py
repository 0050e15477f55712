"""The probe's `--budget` is the whole run: building the model, the warm-up, every timing round, the
profiles and the peak, all on one clock started before the model is built.

After the first timed round (every width's first timed step), `WholeBudget.after_first_round`
estimates the whole run and says so before the remaining rounds start:

    so far (build, warm-up, round 1, one profile) + (rounds - 1) x round
        + profiles x (round + widths x profile overhead) + peak

The profile overhead (profiler start and stop, the trace written, read back and tabled) is measured:
`calibrate` profiles the cheapest width once, before the floor is committed to, and the overhead is
that profile's seconds less the width's plain step. Without `calibrate` a profiled step is assumed
to cost PROFILE_COST plain steps (a fresh-eyes trial found that 2.6x too high: "floor 29.3 s of the
30 s budget" for a probe that took 11.4 s, leaving room for no more than the floor's rounds).

The floor is what a probe needs to give a result at all: `timing.MIN_ROUNDS` rounds (outliers cannot
be told from fewer) and one profiled step per width. A floor that cannot fit is said with the budget
that would fit it, and then, as the spec's `over_budget` asks: "refuse" (a `TuneproofError`, exit 2,
one line) or "floor" (run the floor alone, saying it is over the budget). Otherwise the rounds get what
the budget leaves after all the profiles and the peak are set aside.

From the estimate on, the run keeps a promise: the budget, or the stated floor when it runs over. A
machine that gets busier after the estimate (a neighbour's job) cannot stretch it: a profile round
beyond the first runs only when it fits before the promise (`room_for`), and every progress line past
the budget says by how much and what is left (`status`). A 30 s doctor once profiled for 35 minutes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from tuneproof.core.errors import TuneproofError

OVER_BUDGET = ("refuse", "floor")
# A profiled step costs about this many plain steps: the profiler's start and stop, the Chrome trace
# written and read back, the kernel table built. Measured: the tiny model's forward probe at widths
# 512-2048 on a loaded 2-core CPU spent about 50 s on 9 profiles of 3.68 s rounds (4.5x); an estimate
# low by half overran a 60 s budget by 31 s, so this errs high.
PROFILE_COST = 5.0
PEAK_SECONDS = 0.5  # `probe_peak` times each GEMM size for at most this (measure.peak.SIZES: 3 sizes)
PEAK_SIZES = 3
FIT_MARGIN = 1.25  # the budget suggested for a floor that does not fit: the estimate plus a quarter


@dataclass(kw_only=True, frozen=True, slots=True)
class Estimate:
    """The whole run, estimated after the first timed round (seconds)."""

    so_far_s: float  # since the budget's clock started: build, warm-up, round 1
    round_s: float  # one round: every width's first timed step
    floor_rounds: int
    profiles_s: float  # every profile the spec asks for
    peak_s: float
    budget_s: float
    max_rounds: int = 10_000
    profile_basis: str = ""  # how the profiles' seconds were estimated
    profiles: int = 1  # profiled steps per width asked for; the floor takes one

    @property
    def floor_profiles_s(self) -> float:
        return self.profiles_s / max(self.profiles, 1)

    @property
    def floor_s(self) -> float:
        rounds_s = (self.floor_rounds - 1) * self.round_s
        return self.so_far_s + rounds_s + self.floor_profiles_s + self.peak_s

    @property
    def fits(self) -> bool:
        return self.floor_s <= self.budget_s

    @property
    def would_fit_s(self) -> int:
        return math.ceil(FIT_MARGIN * self.floor_s)

    def line(self) -> str:
        head = (
            f"estimate: the floor ({self.floor_rounds} timing rounds of {self.round_s:.3g} s, one profile "
            f"per width {self.floor_profiles_s:.3g} s{self.profile_basis}, the peak up to "
            f"{self.peak_s:.3g} s, after {self.so_far_s:.3g} s of building, warm-up and round 1) takes "
            f"about {self.floor_s:.3g} s of the {self.budget_s:g} s budget"
        )
        if not self.fits:
            return f"{head}: it does not fit; a budget of {self.would_fit_s} s would"
        profiles = self.profiles_s - self.floor_profiles_s  # the profiles beyond the floor's one
        spare = self.budget_s - self.floor_s - profiles
        if spare < 0:
            kept = 1 + int((self.budget_s - self.floor_s) // (profiles / max(self.profiles - 1, 1)))
            return f"{head}; room for {kept} of the {self.profiles} profiles per width, no more rounds"
        extra = spare // self.round_s if self.round_s else self.max_rounds
        rounds = min(self.floor_rounds + int(extra), self.max_rounds)
        most = " (the most allowed)" if rounds == self.max_rounds else ""
        whole = self.floor_s + profiles + (rounds - self.floor_rounds) * self.round_s
        return (
            f"{head}; room for about {rounds} rounds in all{most}: the whole probe about "
            f"{whole:.3g} s at most (less if the medians are tight sooner)"
        )


@dataclass(kw_only=True, slots=True)
class WholeBudget:
    """One probe's whole budget on `clock` (started at `started`). `after_first_round` is the
    `time_interleaved` hook; `notice` receives the estimate line as soon as it is known."""

    budget_s: float
    clock: Callable[[], float]
    started: float
    profiles: int
    over_budget: str = "refuse"
    max_rounds: int = 10_000
    peak_s: float = PEAK_SECONDS * PEAK_SIZES
    notice: Callable[[str], None] | None = None
    calibrate: Callable[[Hashable], float] | None = None  # one profiled step of a width, its seconds
    estimate: Estimate | None = None
    lines: list[str] = field(default_factory=list)
    promise_s: float = 0.0  # the budget, or the floor's estimate when it runs over (set by the estimate)
    rounds_done: int = 0
    profiles_done: bool = False  # the floor's profile round ran
    pace: float = 1.0  # the last round's seconds against the estimate's (a busier machine: above 1)
    restated: bool = False  # the floor's end was said again, the machine having slowed

    def after_first_round(self, first: dict[Hashable, float], timing_elapsed_s: float) -> float:
        """The estimate from the first timed step of every width; returns the seconds the timing rounds
        may take in all (counted from their start), or raises when the floor cannot fit and the spec
        says refuse."""
        from tuneproof.measure.timing import MIN_ROUNDS

        round_s = sum(first.values())
        profiles_s = self.profiles * round_s * PROFILE_COST
        basis = f" (assumed {PROFILE_COST:g}x a plain step)"
        calibrating = self.clock()
        if self.calibrate is not None and first:
            cheapest = min(first, key=lambda k: first[k])
            overhead = max(self.calibrate(cheapest) - first[cheapest], 0.0)
            profiles_s = self.profiles * (round_s + len(first) * overhead)
            basis = f" (one profile measured: {overhead:.3g} s over its plain step)"
        timing_elapsed_s += self.clock() - calibrating  # the calibration ran inside the timing's window
        so_far = self.clock() - self.started
        est = Estimate(
            so_far_s=so_far, round_s=round_s, floor_rounds=MIN_ROUNDS, profiles_s=profiles_s,
            peak_s=self.peak_s, budget_s=self.budget_s, max_rounds=self.max_rounds, profile_basis=basis,
            profiles=self.profiles,
        )  # fmt: skip
        self.estimate = est
        self.promise_s = max(self.budget_s, est.floor_s)
        if not est.fits and self.over_budget == "refuse":
            raise TuneproofError(
                f"{{budget_s}} {self.budget_s:g} s cannot fit the probe's floor: {est.line()}",
                f"give {{budget_s}} {est.would_fit_s} or more, fewer or narrower {{widths}}, "
                "or {over_budget} floor to run the floor anyway",
                fields=("budget_s", "widths", "over_budget"),
            )
        line = est.line() + ("; running the floor alone, as asked" if not est.fits else "")
        self.say(line)
        return self.budget_s - (so_far - timing_elapsed_s) - est.profiles_s - est.peak_s

    def elapsed(self) -> float:
        return self.clock() - self.started

    def after_round(self, rounds: int, round_s: float) -> None:
        """A timing round ended: the pace of the machine against the estimate's round."""
        self.rounds_done = rounds
        if self.estimate is not None and self.estimate.round_s > 0 and rounds > 1:
            self.pace = round_s / self.estimate.round_s
            self._restate()

    def profiled(self, round_s: float) -> None:
        """The floor's profile round (every width once) took `round_s`."""
        if self.estimate is not None and not self.profiles_done and self.estimate.floor_profiles_s > 0:
            self.pace = round_s / self.estimate.floor_profiles_s
        self.profiles_done = True

    def floor_left_s(self) -> float:
        """Seconds of the floor still to run, at the machine's present pace."""
        from tuneproof.measure.timing import MIN_ROUNDS

        est = self.estimate
        if est is None:
            return 0.0
        rounds = max(MIN_ROUNDS - self.rounds_done, 0) * est.round_s
        profiles = 0.0 if self.profiles_done else est.floor_profiles_s
        return self.pace * (rounds + profiles) + est.peak_s

    def _restate(self) -> None:
        """Once the machine runs 20 % slower than at the estimate, say when the floor will end now:
        the stated floor is the promise, restated as soon as it moves."""
        end = self.elapsed() + self.floor_left_s()
        if self.restated or end <= 1.2 * self.promise_s:
            return
        self.restated = True
        self.say(
            f"the machine runs {self.pace:.1f}x slower than at the estimate: the floor now ends at about "
            f"{end:.0f} s, not {self.promise_s:.0f} s"
        )
        self.promise_s = end

    def room_for(self, seconds: float) -> bool:
        """Whether `seconds` more work ends before the promise (the budget, or the stated floor)."""
        return self.elapsed() + seconds <= max(self.promise_s, self.budget_s)

    def status(self) -> str:
        """Nothing within the budget; past it, by how much and what is left of the promise."""
        took = self.elapsed()
        if took <= self.budget_s:
            return ""
        left = self.floor_left_s()
        rest = f"the floor ends in about {left:.0f} s" if left >= 1 else "finishing the floor's last step"
        if self.estimate is None:
            rest = "the estimate comes after the first round"
        return f" ({took - self.budget_s:.0f} s past the probe's {self.budget_s:g} s budget; {rest})"

    def say(self, line: str) -> None:
        self.lines.append(line)
        if self.notice:
            self.notice(line)

    def finish(self) -> str:
        """The line that says what the whole run took against the budget."""
        took = self.clock() - self.started
        over = "over" if took > self.budget_s else "within"
        line = (
            f"the whole probe took {took:.1f} s from the model build, {over} the {self.budget_s:g} s budget"
        )
        self.lines.append(line)
        return line
