"""Two arms' benchmark runs lined up before any judging, or refused in one line: every run holds the same
tasks and metrics, and every task the same documents in both arms (the same doc_id and, where lm-eval
recorded it, the same doc_hash).

Units are what gets judged: each task outside a group, each group lm-eval aggregates (its subtasks'
documents pooled) and, as evidence, each subtask of such a group. A group lm-eval lists without an
aggregate (a tag) is no unit: its tasks stand alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tuneproof.core.errors import TuneproofError
from tuneproof.gate.lm_eval import BenchRun
from tuneproof.gate.spec import GateSpec, TaskSpec

# The direction of every metric name tuneproof knows, the same whatever the input form (an lm-eval folder,
# a results file, samples files alone, a per-example CSV): lm-eval's own registrations
# (lm_eval/api/metrics.py register_metric), except TER, which lm-eval registers higher-is-better while its
# aggregation says "Lower is better" (an edit distance); the error rates and the per-response counts
# lower. A name not here takes the results file's `higher_is_better`, else the spec's; else it is not judged.
DIRECTIONS: dict[str, bool] = {
    **dict.fromkeys(("acc", "acc_norm", "acc_mutual_info", "acc_all", "exact_match", "mcc", "f1", "bleu",
                     "chrf", "prompt_level_strict_acc", "prompt_level_loose_acc", "inst_level_strict_acc",
                     "inst_level_loose_acc", "pass@1"), True),
    **dict.fromkeys(("perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte", "brier_score",
                     "mae", "ter", "wer", "cer", "len_response", "parse_error"), False),
}  # fmt: skip
RUNS_HINT = "give every run the same tasks, one lm-eval output folder (or results file) per run"


@dataclass(kw_only=True, frozen=True, slots=True)
class BenchUnit:
    name: str
    kind: str  # "task" | "group" | "subtask"
    tasks: tuple[str, ...]  # the tasks whose documents it pools
    rows: tuple[tuple[str, str], ...]  # (filter, metric) judged, the default headline first
    top: bool  # decides (a group, or a task outside any group)

    @property
    def aggregate_note(self) -> str:
        if self.kind != "group":
            return ""
        return " (the gate pools the subtasks' documents, as lm-eval's weight_by_size; unweighted differs)"


@dataclass(kw_only=True, slots=True)
class Lineup:
    base: list[BenchRun]
    tuned: list[BenchRun]
    units: list[BenchUnit]
    docs: dict[str, list[str]]  # task -> its documents, in the base arm's first-run order
    unjudged: list[tuple[str, str, str, str]] = field(default_factory=list)  # task, filter, metric, why
    notes: list[str] = field(default_factory=list)

    def scores(self, unit: BenchUnit, filt: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """runs x documents of each arm, the unit's tasks' documents side by side."""

        def table(runs: list[BenchRun]) -> np.ndarray:
            keys = [(task, d) for task in unit.tasks for d in self.docs[task]]
            return np.array([[r.scores[(task, filt, metric)][d] for task, d in keys] for r in runs], float)

        return table(self.base), table(self.tuned)

    def higher(self, unit: BenchUnit, metric: str, override: bool | None) -> bool | None:
        """Higher is better? The spec's word, else the one table (DIRECTIONS), else the results file's;
        None: unknown (the line is not judged, and says so)."""
        if override is not None:
            return override
        if metric in DIRECTIONS:
            return DIRECTIONS[metric]
        for run in (*self.base, *self.tuned):
            for task in (unit.name, *unit.tasks):
                if (task, metric) in run.higher:
                    return run.higher[(task, metric)]
        return None

    def aggregates(
        self, unit: BenchUnit, filt: str, metric: str, percent: bool
    ) -> dict[str, list[float | None]]:
        scale = 100.0 if percent else 1.0

        def figures(runs: list[BenchRun]) -> list[float | None]:
            out: list[float | None] = []
            for run in runs:
                v = run.aggregates.get((unit.name, filt, metric))
                out.append(None if v is None else v * scale)
            return out

        return {"base": figures(self.base), "tuned": figures(self.tuned)}

    def headline(self, unit: BenchUnit, own: TaskSpec) -> tuple[str, str]:
        """The (filter, metric) that decides for `unit`: the spec's, else its first."""
        if own.metric is None and own.filter is None:
            return unit.rows[0]
        for filt, metric in unit.rows:
            if own.metric in (None, metric) and own.filter in (None, filt):
                return filt, metric
        shown = ", ".join(f"{m} ({f})" for f, m in unit.rows)
        named = " and ".join(f"{k} {v!r}" for k, v in (("metric", own.metric), ("filter", own.filter)) if v)
        corpus = [m for (t, _, m) in self.base[0].corpus_level if t in unit.tasks and m == own.metric]
        why = f": {own.metric} has no number per document (a corpus-level metric)" if corpus else ""
        raise TuneproofError(
            f"the spec's [benchmarks.task.{unit.name}] names {named}, which {unit.name} does not judge{why}",
            f"it has {shown}",
        )


def line_up(base: Sequence[BenchRun], tuned: Sequence[BenchRun], spec: GateSpec) -> Lineup:
    """Refuse runs that cannot be paired; the units to judge, in the order the runs list them."""
    runs = [("base", r) for r in base] + [("tuned", r) for r in tuned]
    first_arm, first = runs[0]
    for arm, run in runs[1:]:
        if run.tasks != first.tasks:
            raise TuneproofError(
                f"run {run.label} of the {arm} arm holds {_names(run.tasks)}; run {first.label} of the "
                f"{first_arm} arm holds {_names(first.tasks)}",
                RUNS_HINT,
            )
        for key in set(run.scores) ^ set(first.scores):
            holder = (arm, run) if key in run.scores else (first_arm, first)
            raise TuneproofError(
                f"{key[0]} {key[2]} (filter {key[1]}) is scored in run {holder[1].label} of the {holder[0]} "
                "arm only",
                RUNS_HINT,
            )
    docs = _documents(runs)
    _same_documents(runs)
    units = _units(first, list(dict.fromkeys(k[0] for k in first.scores)))
    named = {n for n, _ in spec.benchmarks.tasks}
    unknown = sorted(named - {u.name for u in units})
    if unknown:
        raise TuneproofError(
            f"the spec's [benchmarks.task] names {', '.join(unknown)}, which the runs do not hold",
            f"the runs hold {_names({u.name for u in units})}",
        )
    for unit in units:
        margin = spec.benchmarks.task(unit.name).margin
        fractions = all(
            0 <= v <= 1
            for t in unit.tasks
            for (x, _, _), d in first.scores.items()
            if x == t
            for v in d.values()
        )
        if margin is not None and margin > 100 and fractions:
            raise TuneproofError(
                f"the spec's margin {margin:g} for {unit.name} is more than its metrics' whole range "
                "(100 points)",
                "give the margin in points, e.g. margin = 2.0",
            )
    unjudged = sorted({(*key, why) for r in (*base, *tuned) for key, why in r.corpus_level.items()})
    lineup = Lineup(base=list(base), tuned=list(tuned), units=units, docs=docs, unjudged=unjudged)
    for unit in units:
        lineup.headline(unit, spec.benchmarks.task(unit.name))  # refuses a spec naming what is not there
    return lineup


def _names(tasks: set[str]) -> str:
    listed = sorted(tasks)
    if not listed:
        return "no task"
    return ", ".join(listed[:5]) + (f" and {len(listed) - 5} more" if len(listed) > 5 else "")


def _documents(runs: list[tuple[str, BenchRun]]) -> dict[str, list[str]]:
    """Each task's documents; refuses a task whose documents differ between its metrics in one run, or
    between runs (saying how many)."""
    first_arm, first = runs[0]
    docs: dict[str, list[str]] = {}
    for arm, run in runs:
        own: dict[str, tuple[tuple[str, str, str], set[str]]] = {}
        for key, values in run.scores.items():
            have = set(values)
            seen = own.setdefault(key[0], (key, have))
            if seen[1] != have:
                (_, f1, m1), (_, f2, m2) = seen[0], key
                raise TuneproofError(
                    f"{key[0]}: run {run.label} ({arm}) scores {len(seen[1])} documents for {m1} ({f1}) and "
                    f"{len(have)} for {m2} ({f2})",
                    "give every document a row under every filter, with every metric",
                )
            docs.setdefault(key[0], list(values))
    for arm, run in runs:
        for task, want in docs.items():
            have = set(next(v for k, v in run.scores.items() if k[0] == task))
            if have == set(want):
                continue
            only_first, only_here = len(set(want) - have), len(have - set(want))
            where = "arms" if arm != first_arm else f"runs of the {arm} arm"
            raise TuneproofError(
                f"{task}: the documents do not match between the {where}: {len(want)} in run {first.label} "
                f"({first_arm}), {len(have)} in run {run.label} ({arm}); {only_first} only in the first, "
                f"{only_here} only in the second",
                "score both arms on the same documents (the same task version, split and limit)",
            )
    return docs


def _same_documents(runs: list[tuple[str, BenchRun]]) -> None:
    """The same doc_id must be the same document: lm-eval's doc_hash agrees wherever both runs have it."""
    first_arm, first = runs[0]
    for arm, run in runs[1:]:
        differ = [key for key, h in run.doc_hashes.items() if first.doc_hashes.get(key, h) != h]
        if differ:
            task, doc = differ[0]
            raise TuneproofError(
                f"{len(differ)} documents have another doc_hash in run {run.label} ({arm}) than in run "
                f"{first.label} ({first_arm}), e.g. {task} doc {doc}: the runs scored different documents",
                "score both arms on the same task version and dataset",
            )


def _units(run: BenchRun, tasks: list[str]) -> list[BenchUnit]:
    """Groups lm-eval aggregates (pooled), their subtasks as evidence, every other task on its own."""
    present = set(tasks)
    rows = {t: list(dict.fromkeys((f, m) for (task, f, m) in run.scores if task == t)) for t in tasks}

    def leaves(group: str, depth: int = 0) -> list[str]:
        out: list[str] = []
        for child in run.groups.get(group, []):
            if child in present:
                out.append(child)
            elif child in run.groups and depth < 8:
                out.extend(leaves(child, depth + 1))
        return out

    aggregated = {g for (g, _, _) in run.aggregates if g in run.groups}  # groups, not tags
    units: list[BenchUnit] = []
    covered: set[str] = set()
    for group in run.groups:
        members = leaves(group)
        agg = [(f, m) for (g, f, m) in run.aggregates if g == group]
        shared = [r for r in agg if members and all(r in rows[t] for t in members)]
        if not shared:
            continue  # a tag, or a group whose aggregate no subtask carries
        top = not any(group in run.groups[parent] for parent in aggregated)
        units.append(BenchUnit(name=group, kind="group", tasks=tuple(members), rows=tuple(shared), top=top))
        if top:
            units.extend(
                BenchUnit(name=t, kind="subtask", tasks=(t,), rows=tuple(rows[t]), top=False)
                for t in members
                if t not in covered
            )
            covered.update(members)
    units.extend(
        BenchUnit(name=t, kind="task", tasks=(t,), rows=tuple(rows[t]), top=True)
        for t in tasks
        if t not in covered and rows[t]
    )
    return units
