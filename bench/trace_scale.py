"""`tuneproof kernels` on a 1 GB trace (issue 21, Scale): the streaming reader against the whole-file
reader and HolisticTraceAnalysis 0.5.0, on the same file in the same run.

The trace is built under /tmp by replicating a real one (the DeepSeek-V3 training rank, train.json of
deepseek-ai/profile-data, 3.1 MB, 14,240 events) with every copy's ts shifted past the previous copy's
last end, until the file reaches --size-gb. Each reader runs in its own child process; wall time, CPU
time (user + system) and peak RSS (ru_maxrss) of that child, from os.wait4, are printed with their
ratios to the streaming path. On a shared machine wall time carries the others' load (the load average
is printed); CPU time is the reader's own work.

- streaming: `tuneproof kernels --trace FILE --json` (trace_read.read_trace);
- whole-file: the reader tuneproof had before (kept below as `_OLD_READER`: read all bytes,
  json.loads, then the same kernel table);
- HTA: `TraceAnalysis(trace_dir=...)` (parses the file into pandas) then `get_temporal_breakdown()`,
  in the venv given by --hta-python, under --hta-timeout seconds and --hta-mem-gb of address space;
  a run that passes either is reported as such. Make the venv with
  `python3 -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis==0.5.0`.

Goal: streaming under 30 s and 1.5 GB peak RSS on the 1 GB file.

    .venv/bin/python bench/trace_scale.py --size-gb 0.1      # small first
    .venv/bin/python bench/trace_scale.py --hta-python /tmp/hta/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

MIRROR = Path("/work/.mirror/deepseek-ai+profile-data/repo")
GOAL_S, GOAL_GB = 30.0, 1.5

_OLD_READER = """
import gzip, json, sys
from tuneproof.measure.kernels import kernel_table
raw = open(sys.argv[1], "rb").read()
if raw[:2] == b"\\x1f\\x8b":
    raw = gzip.decompress(raw)
data = json.loads(raw)
del raw
if isinstance(data, list):
    data = {"traceEvents": data}
t = kernel_table(data)
print(json.dumps({"total_ms": t.total_ms}))
"""

_HTA = """
import sys, os
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
print(a.get_temporal_breakdown(visualize=False).to_string())
"""


def source_trace(path: str | None) -> bytes:
    if path:
        return Path(path).read_bytes()
    return subprocess.run(
        ["git", "-C", str(MIRROR), "show", "HEAD:train.json"], check=True, capture_output=True
    ).stdout


def build(src: bytes, size_gb: float, out: Path) -> tuple[int, int]:
    """Write copies of src's events, each shifted past the last, until out holds size_gb; (copies, bytes)."""
    trace = json.loads(src)
    events = trace.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), int | float)]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - start + 1000.0  # 1 ms between copies
    # each event as text around its ts, so a copy is one format per event
    parts = []
    for e in events:
        if isinstance(e.get("ts"), int | float):
            ts = e["ts"]
            e = {**e, "ts": "@TS@"}
            pre, post = json.dumps(e).split('"@TS@"')
            parts.append((pre, ts, post))
        else:
            parts.append((json.dumps(e), None, ""))
    target, copies, written = int(size_gb * 2**30), 0, 0
    tmp = out.with_suffix(".part")
    with tmp.open("w") as f:
        head = json.dumps(trace)[:-1] + ', "traceEvents": [\n'
        f.write(head)
        written += len(head)
        while written < target:
            shift = copies * span
            text = ",\n".join(pre if ts is None else f"{pre}{ts + shift!r}{post}" for pre, ts, post in parts)
            f.write((",\n" if copies else "") + text)
            written += len(text) + 2
            copies += 1
        f.write("\n]}\n")
    tmp.replace(out)
    return copies, out.stat().st_size


def timed(cmd: list[str], timeout: float, mem_gb: float | None = None) -> dict[str, object]:
    """Run cmd in a child: wall seconds, peak RSS (GB), exit status, and whether it hit a limit."""

    def limit() -> None:
        if mem_gb:
            cap = int(mem_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit)
    deadline, status, usage = t0 + timeout, None, None
    while status is None:
        pid, st, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            status, usage = st, ru
        elif time.perf_counter() > deadline:
            p.kill()
            _, st, ru = os.wait4(p.pid, 0)
            status, usage = None, ru
            break
        else:
            time.sleep(0.05)
    wall = time.perf_counter() - t0
    err = (p.stderr.read().decode(errors="replace") if p.stderr else "").strip().splitlines()
    assert usage is not None
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,  # the child's own CPU time: fairer on a shared machine
        "rss_gb": usage.ru_maxrss * 1024 / 2**30,  # ru_maxrss is KiB on Linux
        "rc": os.waitstatus_to_exitcode(status) if status is not None else None,
        "timed_out": status is None,
        "last_error": err[-1] if err else "",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0, help="size of the built trace, GiB")
    ap.add_argument("--src", help="trace to replicate (default: train.json of the profile-data mirror)")
    ap.add_argument("--dir", default="/tmp/tuneproof_trace_scale", help="where the built trace is kept")
    ap.add_argument(
        "--hta-python", help="python of a venv with HolisticTraceAnalysis 0.5.0 (skipped without)"
    )
    ap.add_argument("--hta-timeout", type=float, default=600.0, help="seconds HTA may take")
    ap.add_argument("--hta-mem-gb", type=float, default=12.0, help="address space HTA may take, GiB")
    ap.add_argument("--skip-old", action="store_true", help="leave out the whole-file reader")
    args = ap.parse_args()

    folder = Path(args.dir) / f"{args.size_gb:g}gb"
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / "rank-0.trace.json"  # alone in its folder: HTA reads a folder
    if not trace.exists():
        t0 = time.perf_counter()
        copies, size = build(source_trace(args.src), args.size_gb, trace)
        print(f"built {trace}: {copies} copies, {size / 2**30:.2f} GiB in {time.perf_counter() - t0:.0f} s")
    print(f"trace: {trace} ({trace.stat().st_size / 2**30:.2f} GiB)")

    exe = Path(sys.executable).with_name("tuneproof")
    runs = {
        "streaming (tuneproof kernels)": timed([str(exe), "kernels", "--trace", str(trace), "--json"], 900)
    }
    if not args.skip_old:
        runs["whole-file json.loads"] = timed([sys.executable, "-c", _OLD_READER, str(trace)], 900)
    if args.hta_python:
        hta = [args.hta_python, "-c", _HTA, str(folder)]
        runs["HTA 0.5.0 TraceAnalysis"] = timed(hta, args.hta_timeout, args.hta_mem_gb)
    base = runs["streaming (tuneproof kernels)"]
    print(
        f"\n{'reader':32} {'wall s':>8} {'CPU s':>8} {'peak RSS GB':>12} "
        f"{'x wall':>7} {'x CPU':>7} {'x RSS':>7}  result"
    )
    for name, r in runs.items():
        ok = r["rc"] == 0
        note = (
            "ok"
            if ok
            else f"timed out after {r['wall_s']:.0f} s"
            if r["timed_out"]
            else f"failed (rc {r['rc']}): {str(r['last_error'])[:80]}"
        )
        print(
            f"{name:32} {r['wall_s']:8.1f} {r['cpu_s']:8.1f} {r['rss_gb']:12.2f} "
            f"{r['wall_s'] / base['wall_s']:7.2f} "
            f"{r['cpu_s'] / base['cpu_s']:7.2f} {r['rss_gb'] / base['rss_gb']:7.2f}  {note}"
        )
    met = base["rc"] == 0 and base["wall_s"] < GOAL_S and base["rss_gb"] < GOAL_GB
    print(f"\ngoal (streaming < {GOAL_S:g} s wall and < {GOAL_GB:g} GB): {'met' if met else 'NOT met'}")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
