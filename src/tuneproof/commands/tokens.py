"""`tuneproof tokens` as two library calls: `prepare(spec)` reads the dataset (or a run config's local
datasets) and the tokenizer, refusing in one line what cannot be read; `run(plan)` builds the labels as
the trainer will and returns a `TokensResult`: one `TokenReport` per dataset, FINDINGS (exit 1) when any
has a finding, CLEAN (exit 0) otherwise, UNKNOWN (exit 3) when no example could be modelled.

The input is a dataset (JSONL, JSON, Parquet, a saved datasets folder) with the tokenizer's folder and
the trainer's options, or a run config (an Axolotl YAML, a tuneproof recipe TOML), whose datasets,
tokenizer (the base model's folder) and options are the run's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress
from tuneproof.core.verdict import CANNOT_JUDGE, NoWarnings, Verdict, counted
from tuneproof.labels.report import ABOUT, CLEAN, ModelFacts, TokenReport
from tuneproof.labels.rules import LabelRules

RUN_SUFFIXES = (".yml", ".yaml", ".toml")
TOKENIZER_HINT = "give the folder holding tokenizer.json (or tokenizer.model), e.g. the model's own folder"


@dataclass(kw_only=True, frozen=True, slots=True)
class TokensSpec:
    """`source` a dataset or a run config; for a dataset, `tokenizer` the tokenizer's folder (its
    config.json and generation_config.json, when there, give the embedding rows and stop tokens) and
    `rules` the trainer's options; `limit` reads at most this many rows per dataset."""

    source: Path
    tokenizer: Path | None = None
    rules: LabelRules = field(default_factory=LabelRules)
    limit: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", Path(self.source))
        if self.tokenizer is not None:
            object.__setattr__(self, "tokenizer", Path(self.tokenizer))
        if self.limit is not None and (isinstance(self.limit, bool) or self.limit < 1):
            raise TuneproofError(
                f"{{limit}} is {self.limit!r}", "give a number of rows, at least 1", fields=("limit",)
            )

    @property
    def is_run(self) -> bool:
        return self.source.suffix.lower() in RUN_SUFFIXES


@dataclass(kw_only=True, slots=True)
class Job:
    name: str  # the dataset's path as written
    rows: list[dict[str, Any]] | None
    rules: LabelRules | None
    why_not: str | None = None


@dataclass(kw_only=True, slots=True)
class TokensPlan:
    source: str
    jobs: list[Job]
    tokenizer: Any
    model: ModelFacts
    notes: list[str] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class TokensResult(NoWarnings):
    source: str
    reports: list[TokenReport]
    skipped: list[tuple[str, str]]  # (dataset, why its labels were not modelled)
    notes: list[str] = field(default_factory=list)

    @property
    def findings(self) -> list[str]:
        return [f"{r.source}: {f.text}" for r in self.reports for f in r.findings]

    @property
    def verdict(self) -> Verdict:
        n = sum(len(r.findings) for r in self.reports)
        if not n and all(r.verdict.exit_code == CANNOT_JUDGE for r in self.reports):
            return Verdict(
                outcome="UNKNOWN", reason="no dataset's labels could be modelled", exit_code=CANNOT_JUDGE
            )
        return counted(n, ABOUT, CLEAN)

    def to_dict(self) -> dict[str, Any]:
        v = self.verdict
        return {
            "source": self.source,
            "datasets": [r.to_dict() for r in self.reports],
            "skipped": [{"dataset": d, "why": w} for d, w in self.skipped],
            "notes": list(self.notes),
            "findings": self.findings,
            "verdict": v.outcome,
            "exit_code": v.exit_code,
        }

    def render(self, console: Any) -> None:
        from rich.markup import escape

        for note in self.notes:
            console.print(f"note: {escape(note)}")
        for name, why in self.skipped:
            console.print(f"{escape(name)}: not modelled: {escape(why)}")
        for r in self.reports:
            r.render_body(console)
        v = self.verdict
        console.print(f"verdict: {v.outcome} ({v.reason}; exit {v.exit_code})")


def prepare(spec: TokensSpec) -> TokensPlan:
    from tuneproof.labels.rows import check_path, read_rows

    if spec.is_run:
        return _from_run(spec)
    check_path(spec.source)  # a missing or unreadable dataset is said before the tokenizer loads
    _needs(spec.rules)
    if spec.tokenizer is None:
        raise TuneproofError("a dataset needs its {tokenizer}", TOKENIZER_HINT, fields=("tokenizer",))
    tok = _tokenizer(spec.tokenizer)
    rows = read_rows(spec.source, spec.limit)
    job = Job(name=str(spec.source), rows=rows, rules=spec.rules)
    return TokensPlan(
        source=str(spec.source), jobs=[job], tokenizer=tok, model=ModelFacts.from_folder(spec.tokenizer)
    )


def _needs(rules: LabelRules | None) -> None:
    """TRL's assistant-only rules ask TRL itself whether it swaps in a training template."""
    if rules is not None and rules.trainer == "trl" and rules.assistant_only_loss:
        from tuneproof.core.extras import require

        require("train", "TRL's assistant_only_loss rules", ("trl",))


def _tokenizer(folder: Path) -> Any:
    from tuneproof.preflight.batches import read_tokenizer

    if not folder.is_dir():
        raise TuneproofError(f"tokenizer {folder} is not a folder", TOKENIZER_HINT)
    tok, why = read_tokenizer(folder)
    if tok is None:
        raise TuneproofError(f"no tokenizer read: {why}", TOKENIZER_HINT)
    return tok


def _from_run(spec: TokensSpec) -> TokensPlan:
    from tuneproof.arch.locate import locate_config
    from tuneproof.labels.from_run import rules_for
    from tuneproof.labels.rows import read_rows
    from tuneproof.preflight.vocab import tokenizer_folder
    from tuneproof.runs.read import read_run_file

    run = read_run_file(spec.source)
    if run.base_model == "tiny":
        raise TuneproofError(
            f"{run.source}: the tiny demo model has no tokenizer folder", "name a local base model"
        )
    config = locate_config(run.base_model)
    if not config.exists():
        raise TuneproofError(
            f"{run.source}: base_model {run.base_model} is no local folder, nor a cached hub id",
            "give the base model's local folder",
        )
    base = config.parent
    if spec.tokenizer is not None or spec.rules != LabelRules():
        raise TuneproofError(
            "a run config gives its own tokenizer and trainer options",
            "drop them, or pass the dataset itself",
        )
    folder, why = tokenizer_folder(run, base)
    if folder is None:
        raise TuneproofError(f"{run.source}: {why}", TOKENIZER_HINT)
    tok = _tokenizer(folder)
    jobs = []
    for ds in run.datasets:
        if ds.local is None and ds.meant_local:
            raise TuneproofError(
                f"{run.source}: dataset {ds.path} not found", "fix its path (from the folder you run in)"
            )
        if ds.local is None:
            jobs.append(
                Job(name=ds.path, rows=None, rules=None, why_not="not a local file (nothing is downloaded)")
            )
            continue
        rules, why_not = rules_for(run, ds)
        _needs(rules)
        rows = read_rows(ds.local, spec.limit) if rules is not None else None
        jobs.append(Job(name=ds.path, rows=rows, rules=rules, why_not=why_not))
    if not jobs:
        raise TuneproofError(f"{run.source} lists no datasets", "add the run's datasets")
    return TokensPlan(
        source=run.source,
        jobs=jobs,
        tokenizer=tok,
        model=ModelFacts.from_folder(base),
        notes=[f"tokenizer from {folder}"],
    )


def run(plan: TokensPlan, progress: Progress | None = None) -> TokensResult:
    from tuneproof.labels.report import check

    say = progress or (lambda _m: None)
    reports, skipped = [], []
    for job in plan.jobs:
        if job.rows is None or job.rules is None:
            skipped.append((job.name, job.why_not or "not read"))
            continue
        say(f"{job.name}: {len(job.rows):,} rows")
        reports.append(check(job.rows, plan.tokenizer, job.rules, plan.model, job.name))
    return TokensResult(source=plan.source, reports=reports, skipped=skipped, notes=plan.notes)
