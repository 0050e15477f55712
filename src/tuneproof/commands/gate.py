"""`tuneproof gate` as two library calls: `prepare(request)` reads and checks every input once, before any
long work (spec, floors, phrase list, probes, corpus files, the out file, both arms, the pairing, the
tokenizer and the embedder); `run(plan, progress)` measures, writes the JSON report to `out` when one
is asked for, and returns a `GateResult` (`tuneproof.core.verdict.Result`): what the command prints, as text
(`render`) or JSON (`to_dict`), its warnings and its verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress

if TYPE_CHECKING:
    from tuneproof.core.verdict import Verdict
    from tuneproof.gate.arms import Arm, Pairing
    from tuneproof.gate.attractors import PhraseMatcher
    from tuneproof.gate.diversity import Embedder
    from tuneproof.gate.judge import GateReport
    from tuneproof.gate.probes import Probe
    from tuneproof.gate.spec import GateSpec
    from tuneproof.gate.tokens import Tokens


@dataclass(kw_only=True, frozen=True, slots=True)
class GateCommandSpec:
    """What `tuneproof gate` judges, as the command's flags give it (each field is the flag of the same
    name); the gate's own thresholds are a `tuneproof.gate.spec.GateSpec`, read from `spec` (its TOML)."""

    base: tuple[Path, ...]  # arm files; one per run for lm-eval files
    tuned: tuple[Path, ...]
    attractors: Path | None = None  # stock phrases, one per line
    corpus: tuple[Path, ...] = ()  # training text for memorisation
    k: int | None = None  # memorisation span in tokens (None: the spec's)
    tokenizer: str | None = None  # local tokenizer folder for memorisation tokens (None: words)
    probes: Path | None = None  # probes TOML
    spec: Path | None = None  # gate spec TOML (None: the defaults)
    embedder: str | None = None  # local embedding model folder
    floors: tuple[str, ...] = ()  # given floors, METRIC=VALUE
    floor_k: float | None = None  # floor = k x run-to-run SD (None: the spec's)
    out: Path | None = None  # also write the JSON report here


@dataclass(kw_only=True, slots=True)
class GatePlan:
    """Every input read and checked: what `run` measures."""

    base: Arm
    tuned: Arm
    pairing: Pairing
    spec: GateSpec
    given: dict[str, float]
    attractors: tuple[PhraseMatcher, str] | None
    corpus: tuple[Path, ...]
    probes: list[Probe]
    tokens: Tokens | None
    embed: Embedder | None
    out: Path | None
    warnings: list[str] = field(default_factory=list)


@dataclass(slots=True)
class GateResult:
    """The gate's report as the command shows it; `verdict` is the overall one (its exit code)."""

    report: GateReport
    warnings: list[str]
    out: Path | None = None

    @property
    def verdict(self) -> Verdict:
        return self.report.judgement

    def to_dict(self) -> dict[str, Any]:
        return self.report.to_dict()

    def render(self, console: Any) -> None:
        from tuneproof.gate.render import render_gate

        render_gate(self.report, console)


def prepare(request: GateCommandSpec) -> GatePlan:
    """Every cheap check, once, in the order a user fixes them: the spec and the floors, the listed
    files, the out file, then both arms and what they share; then the tokenizer and embedder load."""
    from tuneproof.core.io import check_out_file
    from tuneproof.gate.arms import read_arm
    from tuneproof.gate.checks import check_inputs, parse_floors
    from tuneproof.gate.memorise import check_corpus
    from tuneproof.gate.probes import read_probes
    from tuneproof.gate.spec import GateSpec, read_spec

    spec = read_spec(request.spec) if request.spec else GateSpec()
    if request.floor_k is not None:
        spec = replace(spec, floor_k=request.floor_k)
    if request.k is not None:
        spec = replace(spec, k=request.k)
    given = parse_floors(request.floors)
    attractors = _phrases(request.attractors)
    probes = read_probes(request.probes) if request.probes else []
    check_corpus(request.corpus)
    if request.out is not None:
        listed = (request.attractors, request.probes, request.spec)
        sources = (*request.base, *request.tuned, *request.corpus, *(p for p in listed if p is not None))
        check_out_file(request.out, sources)
    for name in ("tokenizer", "embedder"):
        value = getattr(request, name)
        if value is not None and not value.strip():
            raise TuneproofError(
                f"{{{name}}} is empty", "pass a local model folder, or leave the option out", fields=(name,)
            )
    base, tuned = read_arm(request.base, "base"), read_arm(request.tuned, "tuned")
    if request.out is not None:  # nor any file read from inside an input folder
        check_out_file(
            request.out, tuple(f for arm in (base, tuned) for run in arm.bench.values() for f in run.files)
        )
    pairing = check_inputs(base, tuned, spec, given, attractors is not None, probes, bool(request.embedder))
    _distinct_arms(request.base, request.tuned)  # before the tokenizer and the embedder load
    return GatePlan(
        base=base, tuned=tuned, pairing=pairing, spec=spec, given=given, attractors=attractors,
        corpus=request.corpus, probes=probes, tokens=_tokens(request), embed=_embedder(request.embedder),
        out=request.out,
        warnings=[note for note in [pairing.note()] if note],
    )  # fmt: skip


def _distinct_arms(base: tuple[Path, ...], tuned: tuple[Path, ...]) -> None:
    """Refuse an arm judged against itself: one path in both arms, or two files with the same bytes
    (every difference would be 0 and every family "no change")."""
    import filecmp

    for b in base:
        for t in tuned:
            same = Path(b).resolve() == Path(t).resolve()
            twins = not same and Path(b).is_file() and Path(t).is_file() and filecmp.cmp(b, t, shallow=False)
            if same or twins:
                how = "is" if same else "holds the same bytes as"
                raise TuneproofError(
                    f"the tuned arm's {t} {how} the base arm's {b}: the gate would judge a model "
                    "against itself",
                    "pass the base model's outputs as {base} and the tuned model's as {tuned}",
                    fields=("base", "tuned"),
                )


def run(plan: GatePlan, progress: Progress | None = None) -> GateResult:
    """Measure every family and probe (`progress` hears each step), write the report to `plan.out`."""
    from tuneproof.gate.judge import measure

    report = measure(
        plan.base, plan.tuned, plan.pairing, plan.spec, attractors=plan.attractors, corpus=plan.corpus,
        tokens=plan.tokens, probes=plan.probes, embed=plan.embed, given_floors=plan.given, progress=progress,
    )  # fmt: skip
    if plan.out is not None:
        from tuneproof.core.io import atomic_write_json

        atomic_write_json(plan.out, report.to_dict())
    return GateResult(report, list(plan.warnings), plan.out)


def _phrases(path: Path | None) -> tuple[PhraseMatcher, str] | None:
    if path is None:
        return None
    from tuneproof.gate.attractors import PhraseMatcher, read_phrases

    listed, sha = read_phrases(path)
    return PhraseMatcher(listed), sha


def _tokens(request: GateCommandSpec) -> Tokens | None:
    """The memorisation tokenizer: only with a corpus to tokenize (without one, `tokenizer` is unused)."""
    if not (request.tokenizer and request.corpus):
        return None
    from tuneproof.gate.tokens import load_tokenizer

    return load_tokenizer(request.tokenizer)


def _embedder(path: str | None) -> Embedder | None:
    if not path:
        return None
    from tuneproof.gate.diversity import load_embedder

    return load_embedder(path)
