"""Streams and ranks: per-stream busy time, the union, the window, idle time and overlap (one sweep,
tuneproof.trace.timeline), on a hand-computable fixture, a DeepSeek-V3 H800 rank with three
overlapping streams, and HolisticTraceAnalysis's own test traces against the numbers HTA 0.5.0 gives.

HTA numbers: HolisticTraceAnalysis 0.5.0 (pip), `TraceAnalysis(trace_dir=d).get_temporal_breakdown()`
and `.get_comm_comp_overlap()`, run once on the files in tests/data (see tests/data/README.md). HTA
documents numbers in its own tests only for its vision_transformer traces, absent from its snapshot.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError
from tuneproof.measure.kernels import _table, rank_tables
from tuneproof.trace.read import Trace, load_trace
from tuneproof.trace.timeline import Span, rank_skew, sweep

DATA = Path(__file__).parent.parent / "data"
DEEPSEEK = DATA / "deepseek_v3_train_h800.json.gz"
HTA = DATA / "hta"
MI250 = "mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def _kernel(name: str, ts_ms: float, dur_ms: float, stream: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "ts": ts_ms * 1e3,
        "dur": dur_ms * 1e3,
        "pid": 0,
        "tid": stream,
        "args": {"stream": stream, "device": 0},
    }


# stream 7: GEMM [0, 10), attention [12, 20); stream 20: NCCL [5, 15); stream 21: GEMM [8, 11);
# stream 22: copy [25, 27). Times in ms.
FIXTURE = [
    _kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 0, 10, 7),
    _kernel("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", 12, 8, 7),
    _kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 5, 10, 20),
    _kernel("nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_TNN", 8, 3, 21),
    {**_kernel("Memcpy DtoD (Device -> Device)", 25, 2, 22), "cat": "gpu_memcpy"},
]


def test_overlapping_streams_fixture_by_hand() -> None:
    t = _table(Trace.of({"traceEvents": FIXTURE}), 5)
    tl = t.timeline
    assert tl is not None
    assert tl.window_ms == pytest.approx(27.0)  # 0 to 27
    assert tl.summed_ms == pytest.approx(33.0) == t.total_ms  # 10 + 8 + 10 + 3 + 2
    assert tl.union_ms == pytest.approx(22.0)  # [0, 20) and [25, 27)
    assert tl.idle_ms == pytest.approx(5.0) == t.idle_ms  # [20, 25)
    assert tl.stream_ms == pytest.approx({"0/7": 18.0, "0/20": 10.0, "0/21": 3.0, "0/22": 2.0})
    # NCCL [5, 15) against compute [0, 11) and [12, 20): [5, 11) and [12, 15)
    assert tl.comm_compute_overlap_ms == pytest.approx(9.0)
    assert tl.comm_overlap_of_comm() == pytest.approx(0.9)
    # compute on two streams at once: the GEMMs on 7 and 21 over [8, 10)
    assert tl.compute_compute_overlap_ms == pytest.approx(2.0)
    # the GEMM class is busy over [0, 11): 11 ms of wall time, 13 ms summed
    assert t.ms["gemm"] == pytest.approx(13.0) and tl.class_wall_ms["gemm"] == pytest.approx(11.0)
    assert t.share("gemm") == pytest.approx(13 / 33) and t.wall_share("gemm") == pytest.approx(11 / 27)


def test_touching_kernels_do_not_overlap() -> None:
    spans = [
        Span(start_us=0, end_us=5, stream="a", cls="gemm"),
        Span(start_us=5, end_us=9, stream="b", cls="gemm"),
        Span(start_us=9, end_us=10, stream="c", cls="communication"),
    ]
    tl = sweep(spans)
    assert tl.compute_compute_overlap_ms == 0.0 and tl.comm_compute_overlap_ms == 0.0
    assert tl.union_ms == pytest.approx(0.010) and tl.idle_ms == 0.0


def test_one_stream_summed_is_wall_time() -> None:
    t = _table(Trace.of({"traceEvents": FIXTURE[:2]}), 5)
    assert t.timeline is not None and t.timeline.union_ms == pytest.approx(t.total_ms)
    assert t.share("attention") == pytest.approx(8 / 18)
    assert t.wall_share("attention") == pytest.approx(8 / 20)  # the window includes the 2 ms gap


def test_deepseek_v3_rank_window_is_not_the_summed_time() -> None:
    t = _table(load_trace(DEEPSEEK), 5)
    tl = t.timeline
    assert tl is not None and tl.num_streams == 3
    assert tl.window_ms == pytest.approx(129.012, abs=1e-3)
    assert t.total_ms == pytest.approx(244.0, abs=0.1) == tl.summed_ms
    assert tl.idle_ms == pytest.approx(0.497, abs=1e-3)  # HTA 0.5.0: idle_time 497 us of 129012 us
    assert set(tl.stream_ms) == {"0/7", "0/23", "0/27"}
    # DeepEP's all-to-all is communication: 46 % of summed kernel time, 88 % of the window
    assert t.share("communication") == pytest.approx(0.465, abs=0.005)
    assert t.wall_share("communication") == pytest.approx(0.879, abs=0.005)
    assert all("dpsk::ep::" in n for n, _, _ in t.top["communication"])
    # 96 % of the communication time runs under compute on another stream
    assert tl.comm_overlap_of_comm() == pytest.approx(0.963, abs=0.002)
    assert t.ms["grouped_gemm"] == pytest.approx(74.5, abs=0.1)


def test_deepseek_json_labels_both_bases(capsys) -> None:
    assert main(["kernels", "--trace", str(DEEPSEEK), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert "summed kernel time" in d["shares"] and "wall time" in d["shares"]
    assert d["timeline"]["window_ms"] == pytest.approx(129.012, abs=1e-3)
    assert d["classes"]["communication"]["share"] == pytest.approx(0.465, abs=0.005)
    assert d["classes"]["communication"]["share_of_window"] == pytest.approx(0.879, abs=0.005)
    unnamed = {u["name"].split("<")[0] for u in d["unclassified"]}
    assert unnamed == {"void cuda::per_token_cast_to_fp8_with_channels", "void cuda::reduce_fused_impl"}
    assert main(["kernels", "--trace", str(DEEPSEEK)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "window (first start to last end): 129.0 ms; summed kernel time 244.1 ms (1.89x the window)" in out
    assert "idle (window minus busy): 0.497 ms (0.4 % of the window)" in out
    assert "unclassified" in out and "per_token_cast_to_fp8" in out
    assert "busy per stream (device/stream): 0/7 118.2 ms, 0/27 114.5 ms, 0/23 11.4 ms" in out
    assert (
        "overlap: compute with communication 109.2 ms (84.7 % of the window; 96.3 % of communication" in out
    )


def _hta_scope(path: Path) -> Trace:
    """HTA's scope (hta/common/trace.py _filter_irrelevant_gpu_kernels, include_last_profiler_step
    False): only the GPU kernels whose launching CPU event starts before the last ProfilerStep does.
    Read whole here: the kernel table's reader keeps no CPU rows once it has device rows."""
    trace = json.loads(gzip.decompress(path.read_bytes()))
    events = trace["traceEvents"]
    last = max(e["ts"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    device = {"kernel", "gpu_memcpy", "gpu_memset"}
    launched = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") not in device and "correlation" in e.get("args", {}) and e["ts"] < last
    }
    kept = [e for e in events if e.get("cat") not in device or e["args"].get("correlation") in launched]
    return Trace.of({**trace, "traceEvents": kept})


# HTA 0.5.0 on tests/data/hta/sampled_rank-*.json.gz: rank -> (kernel_time, idle, compute, non-compute) in
# us from get_temporal_breakdown, comp_comm_overlap_pctg from get_comm_comp_overlap
HTA_SAMPLED = {
    0: ((600058, 321378, 106252, 172428), 11.81),
    1: ((600674, 328671, 135548, 136455), 20.05),
}


@pytest.mark.parametrize("rank", sorted(HTA_SAMPLED))
def test_matches_hta_temporal_breakdown_and_overlap(rank: int) -> None:
    tl = _table(_hta_scope(HTA / f"sampled_rank-{rank}.json.gz"), 5).timeline
    assert tl is not None
    (kernel_time, idle, compute, non_compute), overlap_pct = HTA_SAMPLED[rank]
    assert tl.window_ms * 1e3 == pytest.approx(kernel_time, abs=0.5)
    assert tl.idle_ms * 1e3 == pytest.approx(idle, abs=0.5)
    assert tl.compute_ms * 1e3 == pytest.approx(compute, abs=0.5)
    # HTA's non-compute time is the window minus compute minus idle: busy time with no compute kernel
    assert (tl.union_ms - tl.compute_ms) * 1e3 == pytest.approx(non_compute, abs=0.5)
    hidden = tl.comm_overlap_of_comm()
    assert hidden is not None and round(100 * hidden, 2) == overlap_pct


def test_whole_file_differs_from_hta_by_the_last_step() -> None:
    """tuneproof counts every kernel in the file; HTA drops those launched in the last ProfilerStep, so
    on rank 0 its window is 600.1 ms where the file's kernels span 1222.8 ms."""
    tl = _table(load_trace(HTA / "sampled_rank-0.json.gz"), 5).timeline
    assert tl is not None
    assert tl.window_ms == pytest.approx(1222.847, abs=1e-3) and tl.idle_ms == pytest.approx(
        675.191, abs=1e-3
    )


def test_deepseek_differs_from_hta_on_deepep() -> None:
    """HTA's communication pattern (hta/common/types.py: ^nccl, ncclKernel, ^hip, ^hccl) does not know
    DeepEP, so it counts dpsk::ep:: kernels as computation: compute 128500 us of 129012 and a NaN
    overlap (no communication). Its window and idle time are tuneproof's."""
    tl = _table(load_trace(DEEPSEEK), 5).timeline
    assert tl is not None
    hta_compute_us = 128500
    assert tl.union_ms * 1e3 == pytest.approx(128515, abs=0.5)  # HTA: compute + non-compute = 128515
    assert tl.compute_ms * 1e3 < hta_compute_us - 4000  # tuneproof: DeepEP is not compute


def test_amd_trace_against_hta_rounding() -> None:
    """The MI250 trace has nanosecond-resolution times; HTA rounds each kernel inward to whole us (ts up,
    end down; its parser's PyTorch #122425 workaround), tuneproof keeps the fractions. With the same
    rounding, tuneproof gives HTA 0.5.0's numbers: window 8911 us, idle 8780, compute 96, non-compute 35."""
    trace = load_trace(HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    exact = _table(trace, 5).timeline
    assert exact is not None and exact.window_ms == pytest.approx(8.91189, abs=1e-5)
    rounded = []
    for e in trace.events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            start, end = math.ceil(e["ts"]), math.floor(e["ts"] + e["dur"])
            e = {**e, "ts": start, "dur": max(end - start, 0)}
        rounded.append(e)
    tl = _table(replace(trace, events=rounded), 5).timeline
    assert tl is not None
    got = [round(x * 1e3) for x in (tl.window_ms, tl.idle_ms, tl.compute_ms, tl.union_ms - tl.compute_ms)]
    assert got == [8911, 8780, 96, 35]


def test_rank_skew_over_two_ranks() -> None:
    tables = [_table(load_trace(HTA / f"sampled_rank-{r}.json.gz"), 5) for r in (0, 1)]
    assert [t.rank for t in tables] == ["0", "1"]  # distributedInfo.rank
    ranks = rank_tables(tables)
    sk = ranks.skew
    assert sk is not None and (sk.slowest, sk.fastest) == ("1", "0")
    assert sk.union_ms == pytest.approx([547.656, 580.05], abs=1e-3)
    assert sk.max_over_min == pytest.approx(580.05 / 547.656, abs=1e-6)
    d = ranks.to_dict()
    assert [r["rank"] for r in d["ranks"]] == ["0", "1"] and d["skew"]["slowest"] == "1"


def test_rank_tables_render(capsys) -> None:
    from rich.console import Console

    tables = [_table(load_trace(HTA / f"sampled_rank-{r}.json.gz"), 5) for r in (0, 1)]
    console = Console(width=200)
    rank_tables(tables).render(console)
    out = capsys.readouterr().out
    assert (
        "rank skew (busy on any stream): slowest rank 1 580.0 ms, fastest rank 0 547.7 ms, max/min 1.059x"
        in out
    )


def test_cross_check_carries_grouped_gemm_and_says_its_basis() -> None:
    """The cross-check fits every profile column; the MoE class is one of them, and its shares say they
    are of summed kernel time plus idle (wall time on one stream)."""
    import numpy as np

    from fakes import A, B, case_time
    from tuneproof.measure import cross_check
    from tuneproof.measure.kernels import PROFILE_COLUMNS

    assert "grouped_gemm" in PROFILE_COLUMNS and PROFILE_COLUMNS[-1] == "idle"
    rng = np.random.default_rng(0)
    widths = [2048.0, 8192.0, 16384.0]
    timed = [case_time(w) * (1 + 0.002 * rng.standard_normal(8)) for w in widths]
    profiles = []
    for w in widths:
        row = dict.fromkeys(PROFILE_COLUMNS, 0.0)
        row["attention"], row["gemm"], row["grouped_gemm"] = (
            B * w * w * 1e3,
            0.5 * A * w * 1e3,
            0.5 * A * w * 1e3,
        )
        profiles.append(np.array([[row[c] for c in PROFILE_COLUMNS]] * 4))
    cc = cross_check(widths, timed, profiles, at=16384)
    assert cc.values["quadratic_grouped_gemm"] == pytest.approx(0.0, abs=0.01)
    assert (
        cc.to_dict()["profiled_time_basis"] == "summed kernel time plus idle gaps (wall time on one stream)"
    )


def test_the_skew_names_and_ratio_come_from_the_same_ranks(capsys) -> None:
    """An unranked trace among ranked ones is '#<position>': it cannot take the label of rank 1, so
    the slowest and fastest named are the ones the ratio was computed from."""
    from rich.console import Console

    names = ("sampled_rank-0.json.gz", MI250, "sampled_rank-1.json.gz")
    tables = [_table(load_trace(HTA / name), 5) for name in names]
    ranks = rank_tables(tables)
    sk = ranks.skew
    assert sk is not None and sk.ranks == ["0", "#1", "1"] and (sk.slowest, sk.fastest) == ("1", "#1")
    assert sk.max_over_min == pytest.approx(max(sk.union_ms) / min(sk.union_ms))
    ranks.render(Console(width=300))
    out = capsys.readouterr().out
    assert f"fastest rank #1 {min(sk.union_ms):.3g} ms" in out and "slowest rank 1 580.0 ms" in out


def test_two_timelines_under_one_rank_are_refused() -> None:
    tl = _table(load_trace(HTA / "sampled_rank-0.json.gz"), 5).timeline
    assert tl is not None
    with pytest.raises(TuneproofError, match="rank 0 appears twice"):
        rank_skew(["0", "0"], [tl, tl])
