"""Kernel table on checked-in traces: synthetic GPU traces with realistic kernel names and
deviceProperties, and a recorded CPU trace (tests/data/make_*.py wrote them)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tuneproof.cli.app import main
from tuneproof.commands import kernels as area
from tuneproof.core.errors import TuneproofError
from tuneproof.measure.kernels import arch_tag, classify, kernel_table
from tuneproof.trace.read import load_trace

DATA = Path(__file__).parent.parent / "data"


def test_case_trace_reproduces_the_case_shares() -> None:
    t = kernel_table(load_trace(DATA / "case_sm120.json.gz"))
    assert t.source == "device"
    assert t.ms["attention"] == pytest.approx(22_835.8) and t.ms["gemm"] == pytest.approx(2_774.0)
    assert t.ms["other"] == pytest.approx(5_739.0) and t.ms["memory"] == pytest.approx(3_675.4)
    assert round(100 * t.share("attention"), 1) == 65.2
    assert round(100 * t.share("gemm"), 1) == 7.9
    assert round(100 * t.share("other"), 1) == 16.4
    assert t.top["attention"][0] == (
        "fmha_cutlassB_bf16_aligned_128x64_k65536_sm80",
        pytest.approx(12_000.0),
        1,
    )


def test_case_trace_flags_sm80_kernels_on_a_12_0_device() -> None:
    t = kernel_table(load_trace(DATA / "case_sm120.json.gz"))
    assert len(t.arch_mismatch) == 1
    m = t.arch_mismatch[0]
    assert (m.tag, m.capability) == ("sm80", "12.0")
    assert m.ms == pytest.approx(22_835.8) and round(100 * m.share, 1) == 65.2
    assert "built for sm80 on a 12.0 device" in m.finding
    # the sm120 CUTLASS GEMM matches the device and is not a finding
    assert all("sm120" not in e for e in m.examples)


def test_every_kernel_family_is_classified() -> None:
    t = kernel_table(load_trace(DATA / "zoo_sm90.json.gz"))
    assert t.ms == pytest.approx(
        {
            "attention": 0.5,
            "gemm": 0.15,
            "grouped_gemm": 0.05,
            "communication": 0.03,
            "memory": 0.03,
            "other": 0.04,
        }
    )
    assert {m.tag for m in t.arch_mismatch} == {"sm80"}  # fmha_cutlassB_..._sm80 and cutlass_80_tensorop
    assert t.arch_mismatch[0].ms == pytest.approx(0.15)


@pytest.mark.parametrize(
    "name,cls",
    [
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
        ("aten::_efficient_attention_backward", "attention"),
        ("aten::mm", "gemm"),
        ("aten::_grouped_mm", "grouped_gemm"),
        ("aten::copy_", "memory"),
        ("aten::mul", "other"),
        ("triton_tem_fused_mm_4", "gemm"),
        ("record_param_comms", "other"),
    ],
)
def test_rule_table(name: str, cls: str) -> None:
    assert classify(name) == cls


def test_arch_tags() -> None:
    assert arch_tag("fmha_cutlassF_bf16_aligned_64x64_rf_sm80") == (8, 0)
    assert arch_tag("sm90_xmma_gemm_bf16") == (9, 0)
    assert arch_tag("cutlass3x_sm120_tensorop_gemm") == (12, 0)
    assert arch_tag("kernel_sm_90a_thing") == (9, 0)
    assert arch_tag("ampere_bf16_s16816gemm") is None
    assert arch_tag("cutlass_80_tensorop_bf16") == (8, 0)


def test_recorded_cpu_trace_uses_operator_self_time() -> None:
    t = kernel_table(load_trace(DATA / "cpu_tiny_sdpa.json.gz"))
    assert t.source == "cpu_ops" and t.arch_mismatch == []
    # exact numbers of this recording (torch 2.13 CPU, tiny Gemma-4-style model, width 256)
    assert t.total_ms == pytest.approx(271.484556, abs=1e-6)
    assert t.ms["attention"] == pytest.approx(20.77485, abs=1e-6)
    # the experts' aten::mm calls inside aten::_grouped_mm (torch's CPU path) are grouped GEMM time
    assert t.ms["gemm"] == pytest.approx(118.924569, abs=1e-6)
    assert t.ms["grouped_gemm"] == pytest.approx(57.61772, abs=1e-6)
    assert t.top["attention"][0][0] == "aten::_scaled_dot_product_flash_attention_for_cpu_backward"


def test_nested_ops_inside_attention_count_as_attention(tmp_path: Path) -> None:
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::scaled_dot_product_attention",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 100,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::where", "pid": 1, "tid": 1, "ts": 10, "dur": 30},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::_scaled_dot_product_flash_attention_for_cpu",
            "pid": 1,
            "tid": 1,
            "ts": 50,
            "dur": 40,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::where", "pid": 1, "tid": 1, "ts": 200, "dur": 5},
    ]
    t = kernel_table({"traceEvents": ev})
    assert t.ms == pytest.approx({"attention": 0.1, "other": 0.005})


def test_kernels_command(capsys) -> None:
    assert main(["kernels", "--trace", str(DATA / "case_sm120.json.gz"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {"classes", "top", "arch_mismatch", "source"} <= d.keys()
    assert d["classes"]["attention"]["share"] == pytest.approx(0.652, abs=0.0005)
    assert main(["kernels", "--trace", str(DATA / "case_sm120.json.gz")]) == 0
    assert "finding" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b"this is not json", "is not a readable JSON trace"),
        (json.dumps({"traceEvents": []}).encode(), "no kernel or CPU operator events"),
        (json.dumps({"foo": 1}).encode(), "has no traceEvents list"),
    ],
)
def test_bad_traces(tmp_path: Path, capsys, content: bytes, fragment: str) -> None:
    p = tmp_path / "trace.json"
    p.write_bytes(content)
    assert main(["kernels", "--trace", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err and err.count("\n") == 1


def test_corrupt_gzip(tmp_path: Path) -> None:
    p = tmp_path / "trace.json.gz"
    p.write_bytes(gzip.compress(b"{}")[:10])
    with pytest.raises(TuneproofError, match="is not a readable JSON trace"):
        load_trace(p)


def _trace_of(names_us: list[tuple[str, float]], **meta: object) -> dict:
    events, ts = [], 0.0
    for name, dur in names_us:
        events.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"stream": 7}})
        ts += dur + 1
    return {"traceEvents": events, **meta}


def test_old_compute_properties_keep_the_arch_mismatch(tmp_path: Path) -> None:
    """Kineto before PyTorch 1.10 wrote computeProperties (major/minor): the device read from it is
    the one the sm-tag rule checks, so an sm80 kernel on a 9.0 device is still a finding."""
    old = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "major": 9, "minor": 0}]
    p = tmp_path / "old.json"
    p.write_text(
        json.dumps(_trace_of([("fmha_cutlassB_bf16_aligned_64x64_k128_sm80", 100.0)], computeProperties=old))
    )
    t = area.run(area.prepare(area.KernelsSpec(trace=p)))
    assert isinstance(t, area.KernelTable) and t.device and t.device["arch"] == "sm90"
    assert [(m.tag, m.capability) for m in t.arch_mismatch] == [("sm80", "9.0")]


def test_small_times_keep_significant_digits_and_cut_names_stay_distinct(capsys) -> None:
    """A 30 us GEMM is 0.03 ms, not 0.0; three names alike for their first 60 characters show where
    they differ, so no two rows read the same."""
    from rich.console import Console

    stem = "void at::native::vectorized_elementwise_kernel<4, at::native::"
    names = [f"{stem}{f}Functor<float>, at::detail::Array<char*, 3> >(int)" for f in ("Add", "Mul", "Fill")]
    t = kernel_table(
        _trace_of([("sm90_xmma_gemm_bf16", 30.0), *[(n, 20.0 + i) for i, n in enumerate(names)]])
    )
    t.render(Console(width=400))
    out = capsys.readouterr().out
    gemm = next(ln for ln in out.splitlines() if ln.strip().startswith("gemm "))
    assert gemm.split()[1] == "0.03" and "(0.03, 1)" in gemm
    line = next(ln for ln in out.splitlines() if ln.startswith("unclassified"))
    cuts = [c.split(" (")[0] for c in line.split(": ", 1)[1].split("; ")]
    assert (
        len(cuts) == 3
        and len(set(cuts)) == 3
        and all(f in c for f, c in zip(("Fill", "Mul", "Add"), cuts, strict=True))
    )
