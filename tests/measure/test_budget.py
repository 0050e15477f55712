"""`--budget` is the whole probe: build, warm-up, every round, the profiles and the peak, on one clock.

A fake clock that only the fake steps advance: no real timing here (issue 21: `probe --budget 15` on a
0.5B model ran 137 s with no warning before it started)."""

from __future__ import annotations

import json
import math

import pytest

from tuneproof.arch import resolve
from tuneproof.cli.app import main
from tuneproof.commands import probe as probe_command
from tuneproof.commands.probe import ProbeSpec, prepare, run
from tuneproof.core.errors import TuneproofError
from tuneproof.hardware.gpus import Peak
from tuneproof.measure import probe as probe_mod

TINY = resolve("tiny")
WIDTHS = (64, 128, 256)
STEP_S = {64: 1.0, 128: 2.0, 256: 4.0}  # one round: 7 s on the fake clock
BUILD_S = 10.0
PEAK_S = 1.5
# a profiled step costs its plain step plus a fixed overhead (profiler start/stop, the trace written and
# read): at these widths 3.3x to 4x a plain step on average, not the 5x once assumed
PROFILE_OVERHEAD_S = 3.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.calls: dict[int, int] = {}

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The model, its steps, the profiler and the peak faked; each advances `clock` by its cost."""
    fake = FakeClock()

    def fake_steps(model, spec):  # type: ignore[no-untyped-def]
        fake.now += BUILD_S

        def step(w: int):  # type: ignore[no-untyped-def]
            def go() -> int:
                fake.calls[w] = fake.calls.get(w, 0) + 1
                fake.now += STEP_S[w]
                return w

            return go

        return {w: step(w) for w in spec.widths}

    def fake_profile(step, device, path):  # type: ignore[no-untyped-def]
        w = step()
        fake.now += PROFILE_OVERHEAD_S
        ev = [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": w * 10.0, "pid": 1, "tid": 1},
            {"ph": "X", "cat": "cpu_op", "name": "aten::_scaled_dot_product_flash_attention_for_cpu",
             "ts": w * 10.0, "dur": w * w / 10.0, "pid": 1, "tid": 1},
        ]  # fmt: skip
        path.write_text(json.dumps({"traceEvents": ev}))

    def fake_peak(spec):  # type: ignore[no-untyped-def]
        fake.now += PEAK_S
        return Peak(tflops=1.0, source="given", dtype="fp32")

    monkeypatch.setattr(probe_mod, "model_steps", fake_steps)
    monkeypatch.setattr(probe_mod, "_profile", fake_profile)
    monkeypatch.setattr(probe_mod, "probe_peak", fake_peak)
    return fake


def _spec(**kw: object) -> ProbeSpec:
    base: dict[str, object] = dict(
        model=TINY, widths=WIDTHS, mode="forward", profiles=2, min_repeats=30, max_repeats=30
    )
    return ProbeSpec.of(**{**base, **kw})  # type: ignore[arg-type]


# the floor: build 10 + warm-up 7 + 3 rounds of 7 + one profile of the cheapest width measured (1 + 3)
# + one profile of every width (7 + 3 x 3) + the peak's 1.5
FLOOR_S = BUILD_S + 7 + 3 * 7 + (1 + PROFILE_OVERHEAD_S) + (7 + 3 * PROFILE_OVERHEAD_S) + PEAK_S


def test_a_floor_that_cannot_fit_is_refused_after_the_first_round(clock: FakeClock) -> None:
    said: list[str] = []
    with pytest.raises(TuneproofError) as e:
        run(prepare(_spec(budget_s=15.0)), said.append, said.append, clock=clock)
    # the warm-up and the first timed step, and the cheapest width profiled once to measure the overhead
    assert clock.calls == {64: 3, 128: 2, 256: 2}
    msg = e.value.message
    assert f"takes about {FLOOR_S:.3g} s of the 15 s budget: it does not fit" in msg
    assert "(one profile measured: 3 s over its plain step)" in msg
    assert f"a budget of {math.ceil(1.25 * FLOOR_S)} s would" in msg
    assert not any(s.startswith("profile") for s in said)


def test_the_budget_covers_the_whole_run_and_the_estimate_comes_first(clock: FakeClock) -> None:
    said: list[str] = []
    start = clock.now
    r = run(prepare(_spec(budget_s=150.0)), said.append, said.append, clock=clock)
    assert clock.now - start <= 150.0  # build, warm-up, rounds, profiles and peak, all inside
    estimate = next(i for i, s in enumerate(said) if s.startswith("estimate:"))
    assert said[estimate - 1].startswith("round 1: timing") and said[estimate + 1].startswith("round 2")
    assert f"takes about {FLOOR_S:.3g} s of the 150 s budget; room for about" in said[estimate]
    assert r.timing.rounds > 3 and "budget ended" in r.timing.stopped
    assert f"room for about {r.timing.rounds} rounds in all: the whole probe about" in said[estimate]
    whole = float(said[estimate].split("the whole probe about ")[1].split(" s")[0])
    assert whole == pytest.approx(clock.now - start, rel=0.01)  # what ran, foreseen
    assert r.timing.notes[-2] == said[estimate]
    assert r.timing.notes[-1] == (
        f"the whole probe took {clock.now - start:.1f} s from the model build, within the 150 s budget"
    )


def test_the_estimate_counts_no_more_rounds_than_allowed(clock: FakeClock) -> None:
    said: list[str] = []
    r = run(
        prepare(_spec(budget_s=900.0, min_repeats=8, max_repeats=8)),
        None,
        said.append,
        clock=clock,
    )
    assert "room for about 8 rounds in all (the most allowed)" in said[0] and r.timing.rounds == 8


def test_the_floor_runs_over_the_budget_only_when_asked(clock: FakeClock) -> None:
    said: list[str] = []
    r = run(
        prepare(_spec(budget_s=15.0, over_budget="floor")),
        None,
        said.append,
        clock=clock,
    )
    assert r.timing.rounds == 3 and said[0].endswith("running the floor alone, as asked")
    assert "over the 15 s budget" in r.timing.notes[-1]


def test_the_command_refuses_in_one_line_with_the_budget_that_would_fit(clock: FakeClock, capsys) -> None:
    argv = ["probe", "--widths", "64,128,256", "--mode", "forward", "--profiles", "2", "--budget", "15"]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(probe_command, "run", _with_clock(probe_command.run, clock))
        code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err  # one line: the error and its hint
    assert err[0].startswith("error: --budget 15 s cannot fit the probe's floor")
    assert f"a budget of {math.ceil(1.25 * FLOOR_S)} s would" in err[0] and "--over-budget floor" in err[0]


def test_over_budget_is_checked() -> None:
    with pytest.raises(TuneproofError, match="over_budget"):
        _spec(over_budget="maybe")


def _with_clock(real, clock):  # type: ignore[no-untyped-def]
    def wrapped(plan, progress=None, notice=None, clock_=None):  # type: ignore[no-untyped-def]
        return real(plan, progress, notice, clock=clock)

    return wrapped


@pytest.mark.parametrize("command", ["doctor", "plan"])
def test_probe_budget_help_says_the_whole_probe(command: str, capsys) -> None:
    """doctor --help said "Seconds of timing rounds" while docs/doctor.md says seconds for the whole
    probe, which is what the budget counts."""
    assert main([command, "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Seconds for the whole probe of" in out and "timing rounds, profiles, peak" in out
    assert "Seconds of timing rounds" not in out


def test_a_machine_that_gets_busier_after_the_estimate_cannot_stretch_the_budget(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35: a 30 s doctor probe under a neighbour's load profiled for 35 minutes, silently. Here
    every step costs twice as much from round 2 on: the profile rounds that no longer fit are cut (the
    first always runs), the cut is said, and every progress line past the budget says so. Unbounded,
    the three profile rounds would end at 126 s."""
    _slow_after_round_1(clock, monkeypatch, factor=2.0)
    said: list[str] = []
    start = clock.now
    r = run(prepare(_spec(budget_s=70.0, profiles=3)), said.append, said.append, clock=clock)
    took = clock.now - start
    assert took <= 1.2 * 70.0, took
    assert any("profiles cut at 1 of the 3 per width" in n for n in r.timing.notes)
    assert any("s past the probe's 70 s budget" in s for s in said if s.startswith("peak"))
    assert not any("past the" in s for s in said if s.startswith("round 1"))


def test_the_floor_takes_one_profile_per_width_and_says_what_is_left(clock: FakeClock) -> None:
    said: list[str] = []
    start = clock.now
    spec = _spec(budget_s=15.0, over_budget="floor", profiles=3)
    r = run(prepare(spec), said.append, said.append, clock=clock)
    assert clock.now - start == pytest.approx(FLOOR_S)  # the stated floor and nothing more
    assert any("profiles cut at 1 of the 3 per width" in n for n in r.timing.notes)
    past = [s for s in said if "past the probe's 15 s budget" in s]
    assert past[0].endswith("s past the probe's 15 s budget; the estimate comes after the first round)")
    assert "the floor ends in about" in past[-4] and past[-1].startswith("peak")


def test_the_doctor_says_its_probe_estimate_as_it_goes(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35: `make demo`'s doctor said nothing of its 30 s probe budget while it ran for 2,150 s."""
    from tuneproof.commands import doctor
    from tuneproof.core.progress import RecordedProgress
    from tuneproof.measure import timing

    monkeypatch.setattr(timing, "default_clock", clock)
    monkeypatch.setattr(doctor, "PROBE_WIDTHS", WIDTHS)
    said = RecordedProgress()
    section = doctor.probe_section(TINY, 15.0, said)
    assert isinstance(section, doctor.ProbeSection)
    estimate = next(s for s in said.lines if s.startswith("estimate:"))
    assert "of the 15 s budget: it does not fit" in estimate and "running the floor alone" in estimate
    assert said.lines[-1].startswith("peak (") and "past the probe's 15 s budget" in said.lines[-1]


def test_a_floor_that_the_machine_stretches_is_restated_as_it_goes(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35's load run: the doctor's floor was estimated at 47 s, and the neighbour's load then
    doubled; the floor ran 130 s without a word. Here every step costs 4x from round 2 on: the floor's
    new end is said (once) as soon as it moves past its estimate by a fifth, and the run keeps it."""
    _slow_after_round_1(clock, monkeypatch, factor=4.0)
    said: list[str] = []
    start = clock.now
    r = run(
        prepare(_spec(budget_s=15.0, over_budget="floor", profiles=3)), said.append, said.append, clock=clock
    )
    restated = [s for s in said if s.startswith("the machine runs")]
    assert len(restated) == 1 and "x slower than at the estimate: the floor now ends at about" in restated[0]
    new_end = float(restated[0].split("ends at about ")[1].split(" s")[0])
    assert clock.now - start <= 1.2 * new_end
    assert restated[0] in r.timing.notes


def _slow_after_round_1(clock: FakeClock, monkeypatch: pytest.MonkeyPatch, factor: float) -> None:
    """Every step costs `factor` times as much once the warm-up, round 1 and the calibration ran (the
    7 calls the estimate is made from): a neighbour's load arriving after the estimate."""
    real_steps = probe_mod.model_steps

    def slower(model, spec):  # type: ignore[no-untyped-def]
        def busier(go):  # type: ignore[no-untyped-def]
            def run_it() -> int:
                before = clock.now
                w = go()
                if sum(clock.calls.values()) > 7:
                    clock.now += (factor - 1) * (clock.now - before)
                return w

            return run_it

        return {w: busier(go) for w, go in real_steps(model, spec).items()}

    monkeypatch.setattr(probe_mod, "model_steps", slower)
