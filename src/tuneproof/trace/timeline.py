"""Where the device's time goes when kernels overlap: per-stream busy time, the union across streams, the
window, idle time and overlap, from one sweep over kernel start and end points; rank skew across traces.

Conventions (all times in ms; a Chrome trace's ts/dur are microseconds):
- summed: the sum of every kernel's duration. With several streams it exceeds the window.
- window (wall time): first kernel start to last kernel end.
- union busy: time at least one kernel runs on any stream; idle = window - union busy.
- per-stream busy: the union of that stream's kernels.
- a class's wall time: time at least one kernel of that class runs (classes can overlap each other).
- compute: a kernel that is neither communication nor memory (HolisticTraceAnalysis's COMPUTATION
  kernel type, read off the tuneproof classes).
- compute-with-communication: time a communication kernel and a compute kernel run at once.
- compute-with-compute: time compute kernels run on two or more streams at once.
Touching intervals (one ends where the next starts) do not overlap: at equal times ends sort first.
HolisticTraceAnalysis (hta/analyzers/breakdown_analysis.py, communication_analysis.py) computes the
same union, idle and overlap from merged intervals; docs/measure.md says where the two differ.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from tuneproof.core.errors import TuneproofError

NON_COMPUTE = ("communication", "memory")


@dataclass(kw_only=True, frozen=True, slots=True)
class Span:
    start_us: float
    end_us: float
    stream: Hashable
    cls: str


@dataclass(kw_only=True, frozen=True, slots=True)
class Timeline:
    """The overlap-aware account of one rank's kernels (see the module docstring for each term)."""

    window_ms: float
    summed_ms: float
    union_ms: float
    stream_ms: dict[str, float]
    class_wall_ms: dict[str, float]
    compute_ms: float  # union of compute kernels
    comm_compute_overlap_ms: float
    compute_compute_overlap_ms: float

    @property
    def idle_ms(self) -> float:
        return max(self.window_ms - self.union_ms, 0.0)

    @property
    def num_streams(self) -> int:
        return len(self.stream_ms)

    def comm_overlap_of_comm(self) -> float | None:
        """Share of communication wall time hidden under compute (HTA's comp_comm_overlap_ratio)."""
        comm = self.class_wall_ms.get("communication", 0.0)
        return self.comm_compute_overlap_ms / comm if comm else None

    def to_dict(self) -> dict[str, Any]:
        w = self.window_ms
        return {
            "window_ms": w,
            "summed_ms": self.summed_ms,
            "union_busy_ms": self.union_ms,
            "idle_ms": self.idle_ms,
            "idle_share_of_window": self.idle_ms / w if w else None,
            "summed_over_window": self.summed_ms / w if w else None,
            "streams": dict(self.stream_ms),
            "class_wall_ms": dict(self.class_wall_ms),
            "class_share_of_window": {c: v / w if w else None for c, v in self.class_wall_ms.items()},
            "compute_wall_ms": self.compute_ms,
            "overlap": {
                "compute_with_communication_ms": self.comm_compute_overlap_ms,
                "compute_with_compute_ms": self.compute_compute_overlap_ms,
                "communication_hidden_share": self.comm_overlap_of_comm(),
            },
        }


def spans_of(events: Sequence[dict[str, Any]], classes: Sequence[str]) -> list[Span]:
    """Spans from trace events (ts/dur in us) and their classes; the stream is the event's
    args.stream (and args.device) when the trace records it, else its (pid, tid) row."""
    out = []
    for e, cls in zip(events, classes, strict=True):
        raw = e.get("args")
        args: dict[str, Any] = raw if isinstance(raw, dict) else {}
        stream = args.get("stream")
        key: Hashable = (
            (args.get("device", e.get("pid")), stream) if stream is not None else (e.get("pid"), e.get("tid"))
        )
        ts = float(e["ts"])
        out.append(Span(start_us=ts, end_us=ts + float(e["dur"]), stream=key, cls=cls))
    return out


def _stream_label(key: Hashable) -> str:
    if isinstance(key, tuple) and len(key) == 2:
        return f"{key[0]}/{key[1]}"
    return str(key)


def sweep(spans: Sequence[Span]) -> Timeline:
    """One pass over the sorted start/end points (ends before starts at equal times)."""
    points: list[tuple[float, int, int]] = []  # (time, +1 start / -1 end, span index)
    for i, s in enumerate(spans):
        points.append((s.start_us, 1, i))
        points.append((s.end_us, -1, i))
    points.sort(key=lambda p: (p[0], p[1]))
    per_stream: dict[Hashable, int] = {}
    compute_on: dict[Hashable, int] = {}
    stream_us: dict[Hashable, float] = {s.stream: 0.0 for s in spans}
    stream_since: dict[Hashable, float] = {}
    class_count: dict[str, int] = {}
    class_us: dict[str, float] = {}
    union = compute = comm_comp = comp_comp = 0.0
    busy_streams = compute_streams = 0
    prev = points[0][0] if points else 0.0
    for t, delta, i in points:
        dt = t - prev
        if dt > 0:
            n_comm = class_count.get("communication", 0)
            union += dt if busy_streams else 0.0
            compute += dt if compute_streams else 0.0
            comm_comp += dt if n_comm and compute_streams else 0.0
            comp_comp += dt if compute_streams >= 2 else 0.0
            for c, k in class_count.items():
                if k:
                    class_us[c] = class_us.get(c, 0.0) + dt
        prev = t
        s = spans[i]
        before = per_stream.get(s.stream, 0)
        per_stream[s.stream] = before + delta
        if before == 0 and delta > 0:
            busy_streams += 1
            stream_since[s.stream] = t
        elif before == 1 and delta < 0:
            busy_streams -= 1
            stream_us[s.stream] += t - stream_since.pop(s.stream)
        class_count[s.cls] = class_count.get(s.cls, 0) + delta
        if s.cls not in NON_COMPUTE:
            c_before = compute_on.get(s.stream, 0)
            compute_on[s.stream] = c_before + delta
            compute_streams += (c_before == 0 and delta > 0) - (c_before == 1 and delta < 0)
    window = (max(s.end_us for s in spans) - min(s.start_us for s in spans)) if spans else 0.0
    return Timeline(
        window_ms=window / 1e3,
        summed_ms=sum(s.end_us - s.start_us for s in spans) / 1e3,
        union_ms=union / 1e3,
        stream_ms={_stream_label(k): v / 1e3 for k, v in sorted(stream_us.items(), key=lambda kv: str(kv))},
        class_wall_ms={c: v / 1e3 for c, v in sorted(class_us.items())},
        compute_ms=compute / 1e3,
        comm_compute_overlap_ms=comm_comp / 1e3,
        compute_compute_overlap_ms=comp_comp / 1e3,
    )


@dataclass(kw_only=True, frozen=True, slots=True)
class RankSkew:
    """Union busy time across ranks: the slowest and fastest rank and their ratio."""

    ranks: list[str]
    union_ms: list[float]
    slowest: str
    fastest: str
    max_over_min: float | None  # None when the fastest rank has no busy time

    def to_dict(self) -> dict[str, Any]:
        return {
            "ranks": dict(zip(self.ranks, self.union_ms, strict=True)),
            "slowest": self.slowest,
            "fastest": self.fastest,
            "max_over_min_union_busy": self.max_over_min,
        }


def rank_skew(ranks: Sequence[str], timelines: Sequence[Timeline]) -> RankSkew | None:
    """Skew of union busy time over per-rank timelines; None for fewer than two ranks. The ratio and
    the names come from the same entries: two timelines under one label are refused, not merged."""
    if len(timelines) < 2:
        return None
    seen = [r for i, r in enumerate(ranks) if r in ranks[:i]]
    if seen:
        raise TuneproofError(
            f"rank {seen[0]} appears twice among the traces", "pass one trace per rank, all from one run"
        )
    busy = [t.union_ms for t in timelines]
    hi = max(range(len(busy)), key=busy.__getitem__)
    lo = min(range(len(busy)), key=busy.__getitem__)
    return RankSkew(
        ranks=list(ranks),
        union_ms=busy,
        slowest=ranks[hi],
        fastest=ranks[lo],
        max_over_min=busy[hi] / busy[lo] if busy[lo] else None,
    )
