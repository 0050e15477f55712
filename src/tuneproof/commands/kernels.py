"""`tuneproof kernels`: a profiler trace's kernel table by class (`measure.kernels.kernel_table`), one per
rank for a folder of rank traces, with the ranks' skew. A `KernelsSpec`, `prepare` (every trace read and
checked to be one run) and `run`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress
from tuneproof.measure.kernels import KernelTable, RankTables, rank_tables, ranked_table
from tuneproof.trace.read import Trace


@dataclass(kw_only=True, frozen=True, slots=True)
class KernelsSpec:
    """`tuneproof kernels`: the Chrome trace to read and how many top kernels to list per class."""

    trace: Path  # a trace file, or a folder of them (one per rank)
    top_n: int = 5
    more: tuple[Path, ...] = ()  # further trace files or folders, one file per rank

    def __post_init__(self) -> None:
        validate.integer("top_n", self.top_n, high=10_000)


@dataclass(frozen=True, slots=True)
class KernelsPlan:
    trace: Trace  # the first rank's trace
    top_n: int
    ranks: tuple[tuple[str | None, Trace], ...] = ()  # (rank label, trace) per file, all of them


def prepare(spec: KernelsSpec) -> KernelsPlan:
    """Read the traces, streaming (a missing, unreadable or event-less file is refused here)."""
    from tuneproof.trace.read import load_trace, trace_files

    files = trace_files([spec.trace, *spec.more])
    _no_repeats(files)
    ranks = tuple((t.rank, t) for t in map(load_trace, files))
    if len(files) > 1:
        _one_run(files, ranks)
    return KernelsPlan(ranks[0][1], spec.top_n, ranks)


def _no_repeats(files: list[Path]) -> None:
    """Refuse one file given twice, or two files with the same bytes: a trace without a rank would
    otherwise count as two ranks of one run, with no skew between them. Only files of equal size
    are hashed."""
    import hashlib

    by_size: dict[int, list[Path]] = {}
    for p in files:
        if p.is_file():  # a missing one is named by the reader
            by_size.setdefault(p.stat().st_size, []).append(p)
    for group in by_size.values():
        seen: dict[str, Path] = {}
        for p in group if len(group) > 1 else []:
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            first = seen.setdefault(h.hexdigest(), p)
            if first is not p:
                same = "is the same file as" if p.resolve() == first.resolve() else "has the same bytes as"
                raise TuneproofError(
                    f"{p} {same} {first}: one trace given twice", "pass one trace per rank, each once"
                )


def _one_run(files: list[Path], ranks: tuple[tuple[str | None, Trace], ...]) -> None:
    """A skew across traces means something only for one run: refuse two files of one rank (the same
    file twice, or a folder mixing runs) and traces from different devices or platforms."""
    from tuneproof.trace.devices import device_record, platform_of

    first: dict[str, Path] = {}
    for p, (r, _) in zip(files, ranks, strict=True):
        if r is not None and r in first:
            raise TuneproofError(
                f"{first[r]} and {p} are both rank {r}", "pass one trace per rank, all from one run"
            )
        if r is not None:
            first[r] = p
    kinds: dict[tuple[str, Any], Path] = {}
    for p, (_, t) in zip(files, ranks, strict=True):
        dev = device_record(t) or {}
        kinds.setdefault((platform_of(t, dev), dev.get("name")), p)
    if len(kinds) > 1:
        (k1, p1), (k2, p2) = list(kinds.items())[:2]
        raise TuneproofError(
            f"{p1} ({k1[0]}, {k1[1] or 'device not named'}) and {p2} ({k2[0]}, {k2[1] or 'device not named'})"
            " ran on different devices",
            "pass the traces of one run, one per rank",
        )


def run(plan: KernelsPlan, progress: Progress | None = None) -> KernelTable | RankTables:
    """One table for one trace; with several (one per rank), a table per rank and their skew."""
    tables = [ranked_table(label, trace, plan.top_n) for label, trace in plan.ranks or ((None, plan.trace),)]
    return tables[0] if len(tables) == 1 else rank_tables(tables)
