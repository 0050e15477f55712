"""Kernel table from a PyTorch profiler Chrome trace: device time per kernel class, top kernels,
and what the kernels' architecture tags say about the code path.

Source of time: device rows (cat kernel / gpu_memcpy / gpu_memset) when the trace has any; else the
CPU operator rows (cat cpu_op, self time: a row's duration minus its children's on the same thread),
and the table says so. Durations in a Chrome trace are microseconds; the table reports ms.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError
from tuneproof.core.verdict import Unjudged
from tuneproof.trace.kernel_classes import CLASSES, RULES, UNCLASSIFIED_FLOOR, classify, rule_of
from tuneproof.trace.read import DEVICE_CATS, Trace
from tuneproof.trace.timeline import RankSkew, Timeline, rank_skew, spans_of, sweep

# what a profile's time splits into: the busy classes (summed kernel time) and the idle gaps between them
PROFILE_COLUMNS = (*CLASSES, "idle")
__all__ = ["CLASSES", "PROFILE_COLUMNS", "RULES", "KernelTable", "classify", "kernel_table", "rank_skew"]
# "sm80", "sm_90a", "sm120" and CUTLASS 2.x's "cutlass_80_" all name the architecture a kernel was built for
ARCH_TAG = re.compile(r"(?:^|[^a-z0-9])(?:sm_?|cutlass_)(\d{2,3})[a-z]?(?:[^0-9]|$)")


def arch_tag(name: str) -> tuple[int, int] | None:
    """Compute capability from an 'sm80'/'sm_90a'/'sm120' tag in a kernel name."""
    m = ARCH_TAG.search(name.lower())
    if not m:
        return None
    digits = m.group(1)
    return int(digits[:-1]), int(digits[-1])


@dataclass(kw_only=True, frozen=True, slots=True)
class ArchMismatch:
    tag: str
    capability: str
    device: str
    ms: float
    share: float
    examples: list[str]
    efficient_share: float = 0.0  # of device time: SDPA's memory-efficient kernels among them
    gmem_share: float = 0.0  # of device time: their gmem tier (head_dim > 128, output kept in global memory)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tag": self.tag,
            "device_capability": self.capability,
            "device": self.device,
            "ms": self.ms,
            "share": self.share,
            "examples": self.examples,
            "memory_efficient_share": self.efficient_share,
            "gmem_tier_share": self.gmem_share,
        }

    @property
    def finding(self) -> str:
        text = (
            f"{100 * self.share:.1f} % of device time runs kernels built for {self.tag} on a "
            f"{self.capability} device ({self.device}): code not specialised for this card, a hint to look "
            "rather than a fault"
        )
        if self.efficient_share > 0:
            text += (
                f"; {100 * self.efficient_share:.1f} % is SDPA's memory-efficient attention, which ships "
                "only sm80 builds (nothing to rebuild: why SDPA chose it is 'tuneproof explain''s question)"
            )
            if self.gmem_share > 0:
                text += (
                    f", {100 * self.gmem_share:.1f} % its gmem tier for head_dim > 128, the slowest; flash "
                    "takes head_dim <= 256 without a mask, flex any head_dim"
                )
        else:
            text += " (many CUTLASS kernels ship only an sm80 build, which every later card runs)"
        return text


@dataclass(kw_only=True, slots=True)
class KernelTable(Unjudged):
    """Kernel time per class and, on a device, the overlap-aware timeline.

    `ms` per class is summed kernel time (every kernel's duration added up); `share(c)` is of summed
    kernel time. With several streams the summed time exceeds the window (first start to last end), so
    the wall-time view is separate: `timeline` (per-stream and union busy time, the window, overlap) and
    `wall_share(c)`, the time at least one kernel of the class runs over the window. `idle_ms` is the
    window minus the union busy time: on a device, launch- or host-bound gaps; on the CPU (source
    cpu_ops, self times of operator rows, no timeline), Python and dispatch overhead between operators.
    `unclassified`: names no rule in kernel_classes.RULES matched, above 1 % of summed kernel time."""

    source: str  # "device" | "cpu_ops"
    ms: dict[str, float]
    top: dict[str, list[tuple[str, float, int]]]  # class -> [(name, ms, calls)]
    arch_mismatch: list[ArchMismatch] = field(default_factory=list)
    device: dict[str, Any] | None = None
    idle_ms: float = 0.0
    timeline: Timeline | None = None
    unclassified: list[tuple[str, float, int]] = field(default_factory=list)  # (name, ms, calls)
    rank: str | None = None

    @property
    def total_ms(self) -> float:
        """Summed kernel (or CPU self) time."""
        return sum(self.ms.values())

    def share(self, cls: str) -> float:
        """Share of summed kernel time."""
        return self.ms.get(cls, 0.0) / self.total_ms if self.total_ms else 0.0

    def wall_share(self, cls: str) -> float | None:
        """Time at least one kernel of `cls` runs, over the window; None without a timeline."""
        tl = self.timeline
        if tl is None or not tl.window_ms:
            return None
        return tl.class_wall_ms.get(cls, 0.0) / tl.window_ms

    def to_dict(self) -> dict[str, Any]:
        tl = self.timeline
        classes = {
            c: {
                "ms": self.ms.get(c, 0.0),
                "share": self.share(c),
                "wall_ms": tl.class_wall_ms.get(c, 0.0) if tl else None,
                "share_of_window": self.wall_share(c),
            }
            for c in CLASSES
        }
        return {
            "source": self.source,
            "rank": self.rank,
            "total_ms": self.total_ms,
            "shares": "ms and share: summed kernel time; wall_ms and share_of_window: wall time",
            "classes": classes,
            "top": {
                c: [{"name": n, "ms": ms, "calls": k} for n, ms, k in rows] for c, rows in self.top.items()
            },
            "unclassified": [
                {"name": n, "ms": ms, "calls": k, "share_of_summed": ms / self.total_ms}
                for n, ms, k in self.unclassified
            ],
            "idle_ms": self.idle_ms,
            "timeline": tl.to_dict() if tl else None,
            "arch_mismatch": [m.to_dict() for m in self.arch_mismatch],
            "device": self.device,
        }

    def render(self, console: Any) -> None:
        from tuneproof.measure.render import render_kernels

        render_kernels(self, console)


@dataclass(slots=True)
class RankTables(Unjudged):
    """One kernel table per rank (one trace file each) and the skew of their union busy time."""

    tables: list[KernelTable]
    skew: RankSkew | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ranks": [t.to_dict() for t in self.tables],
            "skew": self.skew.to_dict() if self.skew else None,
        }

    def render(self, console: Any) -> None:
        from tuneproof.measure.render import render_ranks

        render_ranks(self, console)


def rank_tables(tables: list[KernelTable]) -> RankTables:
    """Per-rank tables and their skew (union busy time; ranks without a timeline are left out of it)."""
    # an unranked trace is '#<position>', which no distributedInfo rank can equal
    timed = [(t.rank or f"#{i}", t.timeline) for i, t in enumerate(tables) if t.timeline is not None]
    return RankTables(tables, rank_skew([r for r, _ in timed], [tl for _, tl in timed if tl is not None]))


def ranked_table(label: str | None, trace: Trace, top_n: int) -> KernelTable:
    """The rank's table with the device read from the trace itself (trace.devices: CUDA capability,
    ROCm gfx arch or CPU only, and the trace's limits); the sm-tag mismatch rule only on CUDA."""
    from tuneproof.trace.devices import device_info

    table = _table(trace, top_n)
    table.rank = table.rank or label
    table.device = device_info(trace, table.source)
    if table.device.get("platform") != "cuda":
        table.arch_mismatch = []
    return table


def _timed_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Complete ("X") events with a name and finite, non-negative ts and dur; a malformed one is refused."""
    out = []
    for i, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X" or "dur" not in e:
            continue
        ts, dur, name = e.get("ts"), e.get("dur"), e.get("name")
        numbers = [x for x in (ts, dur) if isinstance(x, int | float) and not isinstance(x, bool)]
        ok = (
            isinstance(name, str)
            and len(numbers) == 2
            and all(math.isfinite(x) for x in numbers)
            and numbers[1] >= 0
        )
        if not ok:
            raise TuneproofError(
                f"trace event {i} is malformed (name {name!r}, ts {ts!r}, dur {dur!r})",
                "pass an unedited profiler trace: every complete event has a name and finite ts/dur",
            )
        out.append(e)
    return out


INHERITED = ("attention", "gemm", "grouped_gemm", "communication")


def _self_times(events: list[dict[str, Any]]) -> list[tuple[str, str, float]]:
    """(name, class, exclusive us) per CPU operator row: its duration minus its direct children's on
    the same thread. An operator nested inside an attention, GEMM or communication operator takes the
    outermost such ancestor's class: the mask conversion inside SDPA is attention time."""
    out: list[tuple[str, str, float]] = []
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack: list[list[Any]] = []  # [end, name, class, self_us]
        for e in evs:
            ts, dur = float(e["ts"]), float(e["dur"])
            while stack and stack[-1][0] <= ts:
                _, name, cls, own = stack.pop()
                out.append((name, cls, own))
            cls = classify(e["name"])
            inherited = next((frame[2] for frame in stack if frame[2] in INHERITED), None)
            if stack:
                stack[-1][3] -= dur
            stack.append([ts + dur, e["name"], inherited or cls, dur])
        out.extend((name, cls, own) for _, name, cls, own in stack)
    return out


def _idle_ms(events: list[dict[str, Any]]) -> float:
    """Span from the first start to the last end, minus the union of the events' intervals."""
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events)
    if not spans:
        return 0.0
    busy, cur_start, cur_end = 0.0, spans[0][0], spans[0][1]
    for start, end in spans[1:]:
        if start > cur_end:
            busy += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    busy += cur_end - cur_start
    return (max(e for _, e in spans) - spans[0][0] - busy) / 1e3


def kernel_table(trace: Trace | dict[str, Any], top_n: int = 5) -> KernelTable:
    """Sum time by class, from a `Trace` (`load_trace`) or a whole trace document already loaded (a
    dict with traceEvents). Raises when the trace has no timed events."""
    validate.integer("top_n", top_n, high=10_000)
    return _table(trace if isinstance(trace, Trace) else Trace.of(trace), top_n)


def _table(trace: Trace, top_n: int) -> KernelTable:
    """The table of one rank."""
    events, meta = _timed_events(trace.events), trace.meta
    device_rows = [e for e in events if str(e.get("cat", "")).lower() in DEVICE_CATS]
    names: dict[str, str] = {}
    if device_rows:
        source = "device"
        rows = [(e["name"], _cached(names, e["name"]), float(e["dur"])) for e in device_rows]
    else:
        cpu = [e for e in events if str(e.get("cat", "")).lower() == "cpu_op"]
        source, rows = "cpu_ops", _self_times(cpu)
    if not rows:
        raise TuneproofError(
            "trace has no kernel or CPU operator events",
            "profile a step with torch.profiler (activities CPU and CUDA) and export it",
        )
    ms, top, unclassified = _sums(rows, top_n)
    if source == "device":
        timeline = sweep(spans_of(device_rows, [cls for _, cls, _ in rows]))
        table = KernelTable(source=source, ms=ms, top=top, idle_ms=timeline.idle_ms, timeline=timeline)
    else:
        table = KernelTable(source=source, ms=ms, top=top, idle_ms=_idle_ms(cpu))
    table.unclassified = unclassified
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        table.rank = str(info["rank"])
    from tuneproof.trace.devices import device_record

    dev = device_record(trace, device_rows) if source == "device" else None
    if dev is not None:  # deviceProperties, or the older computeProperties with its keys mapped
        table.device = {k: dev.get(k) for k in ("name", "computeMajor", "computeMinor") if k in dev}
        table.arch_mismatch = _mismatches([(n, us) for n, _, us in rows], dev, table.total_ms)
    return table


def _cached(cache: dict[str, str], name: str) -> str:
    cls = cache.get(name)
    if cls is None:
        cls = cache[name] = classify(name)
    return cls


def _sums(
    rows: list[tuple[str, str, float]], top_n: int
) -> tuple[dict[str, float], dict[str, list[tuple[str, float, int]]], list[tuple[str, float, int]]]:
    """Summed ms per class, the top kernels per class, and the names no rule matched above
    UNCLASSIFIED_FLOOR of summed time (largest first)."""
    ms: dict[str, float] = defaultdict(float)
    per_name: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for name, cls, us in rows:
        ms[cls] += us / 1e3
        acc = per_name[(cls, name)]
        acc[0] += us / 1e3
        acc[1] += 1
    total = sum(ms.values())
    top: dict[str, list[tuple[str, float, int]]] = {}
    unclassified: list[tuple[str, float, int]] = []
    for (cls, name), (t, k) in sorted(per_name.items(), key=lambda kv: -kv[1][0]):
        if len(top.setdefault(cls, [])) < top_n:
            top[cls].append((name, t, int(k)))
        if cls == "other" and total and t / total > UNCLASSIFIED_FLOOR and rule_of(name) is None:
            unclassified.append((name, t, int(k)))
    return dict(ms), top, unclassified


def _mismatches(rows: list[tuple[str, float]], dev: dict[str, Any], total_ms: float) -> list[ArchMismatch]:
    major, minor = dev.get("computeMajor"), dev.get("computeMinor")
    if not isinstance(major, int) or isinstance(major, bool) or total_ms <= 0:
        return []
    found: dict[tuple[int, int], list[Any]] = {}
    for name, us in rows:
        tag = arch_tag(name)
        if tag is None or tag[0] == int(major):
            continue
        acc = found.setdefault(tag, [0.0, [], 0.0, 0.0])
        acc[0] += us / 1e3
        if "fmha_cutlass" in name:  # mem_eff_attention/kernels: fmha_cutlassF/B_..., gmem or k65536
            acc[2] += us / 1e3
            acc[3] += us / 1e3 if ("gmem" in name or "k65536" in name) else 0.0
        if name not in acc[1] and len(acc[1]) < 3:
            acc[1].append(name)
    return [
        ArchMismatch(
            tag=f"sm{a}{b}",
            capability=f"{major}.{minor}",
            device=str(dev.get("name", "?")),
            ms=t,
            share=t / total_ms,
            examples=names,
            efficient_share=eff / total_ms,
            gmem_share=gmem / total_ms,
        )
        for (a, b), (t, names, eff, gmem) in sorted(found.items(), key=lambda kv: -kv[1][0])
    ]
