"""The device an explanation is for and the shared memory flex's options must fit: from a capability, a
GPU name, "auto" or a profiler trace's deviceProperties (real traces from tests/data)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tuneproof.attention.kernel_measure import best_choice
from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError
from tuneproof.hardware.card import CPU, card, of_trace
from tuneproof.trace.read import load_trace

DATA = Path(__file__).parent.parent / "data"
H800 = DATA / "deepseek_v3_train_h800.json.gz"  # DeepSeek's published V3 training trace: 9.0, 232,448 B
V100 = DATA / "hta" / "ns_resolution_rank-0.json.gz"  # HTA's test trace, a Tesla V100: 7.0, 98,304 B


def _trace_like(tmp_path: Path, source: Path, **changes: object) -> Path:
    """`source`'s deviceProperties with `changes`, and one kernel row on its device."""
    with gzip.open(source, "rt") as f:
        props = json.load(f)["deviceProperties"]
    props = [{**p, **changes} for p in props]
    out = tmp_path / "trace.json"
    event = {"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 5, "args": {"device": props[0]["id"]}}
    out.write_text(json.dumps({"deviceProperties": props, "traceEvents": [event]}))
    return out


def test_real_traces_give_their_cards_capability_and_limit() -> None:
    h800 = of_trace(load_trace(H800))
    assert (h800.capability, h800.smem_limit) == ((9, 0), 232_448)
    assert h800.smem_source == "trace deepseek_v3_train_h800.json.gz, NVIDIA H800: sharedMemPerBlockOptin"
    v100 = of_trace(load_trace(V100))
    assert (v100.capability, v100.smem_limit) == ((7, 0), 98_304)
    assert "Tesla V100" in (v100.smem_source or "")


def test_the_traces_limit_decides_the_estimate(tmp_path) -> None:
    """A 9.0 card whose trace says 101,376 B per block (not the table's 232,448 B) gets smaller tiles."""
    small = of_trace(load_trace(_trace_like(tmp_path, H800, sharedMemPerBlockOptin=101_376)))
    assert small.capability == (9, 0) and small.smem_limit == 101_376
    table = best_choice({512}, "bf16", (9, 0), "fwd")
    traced = best_choice({512}, "bf16", (9, 0), "fwd", smem_limit_bytes=small.smem_limit)
    assert table.smem_limit == 232_448 and traced.smem_limit == 101_376
    assert traced.options != table.options and traced.smem_bytes is not None
    assert traced.smem_bytes <= 101_376 < table.smem_bytes
    assert "> 101,376 B per block (capability 9.0)" in traced.reason


def test_explain_with_a_trace_prints_the_limit_and_sizes_flex_by_it(tmp_path, capsys) -> None:
    tight = _trace_like(tmp_path, H800, sharedMemPerBlockOptin=60_000)
    argv = ["explain", "--config", "tiny", "--seq-len", "256", "--attn", "flex_attention", "--training"]
    assert main([*argv, "--trace", str(tight), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["context"]["device"] == "cuda sm_90" and out["context"]["smem_limit"] == 60_000
    assert out["context"]["smem_source"] == "trace trace.json, NVIDIA H800: sharedMemPerBlockOptin"
    for p in ("fwd", "bwd"):
        got = out["flex_kernel_options"][p]
        assert got["smem_limit"] == 60_000 and got["options"] and got["smem_bytes"] <= 60_000
    assert main([*argv, "--trace", str(H800)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "shared memory per block: 232,448 B (trace deepseek_v3_train_h800.json.gz, NVIDIA H800" in text


@pytest.mark.parametrize("value", [None, 0, -5, 1, 49_151, 232_449, "101376", True, 1e30, 101376.5, 2**31])
def test_a_trace_without_a_valid_limit_takes_the_table_and_says_why(tmp_path, value: object) -> None:
    """Valid: an integer from 48 KiB (every CUDA card since Fermi) to the capability's own maximum."""
    t = of_trace(load_trace(_trace_like(tmp_path, H800, sharedMemPerBlockOptin=value)))
    assert (t.capability, t.smem_limit) == ((9, 0), 232_448)
    assert t.smem_source == (
        f"the capability 9.0 table; the trace gives no valid sharedMemPerBlockOptin (device 0: {value!r}; "
        "valid: 49,152 to 232,448 B)"
    )
    assert (
        of_trace(load_trace(_trace_like(tmp_path, H800, sharedMemPerBlockOptin=49_152))).smem_limit == 49_152
    )


def test_the_real_trace_without_the_field_names_the_table() -> None:
    t = of_trace(load_trace(DATA / "zoo_sm90.json.gz"))
    assert t.smem_limit == 232_448 and (t.smem_source or "").startswith("the capability 9.0 table; the trace")


def _two_devices(tmp_path: Path, second: dict[str, object], kernels_on: tuple[int, ...] = (0, 1)) -> Path:
    with gzip.open(H800, "rt") as f:
        first = json.load(f)["deviceProperties"][0]
    props = [{**first, "id": 0}, {**first, "id": 1, **second}]
    events = [{"ph": "X", "cat": "kernel", "name": "k", "ts": i, "dur": 5, "args": {"device": d}}
              for i, d in enumerate(kernels_on)]  # fmt: skip
    out = tmp_path / "two.json"
    out.write_text(json.dumps({"deviceProperties": props, "traceEvents": events}))
    return out


def test_a_trace_over_several_devices_is_judged_on_all_it_ran_on(tmp_path) -> None:
    smaller = of_trace(load_trace(_two_devices(tmp_path, {"sharedMemPerBlockOptin": 101_376})))
    assert smaller.smem_limit == 101_376  # options that fit every device the kernels ran on
    assert (smaller.smem_source or "").endswith("sharedMemPerBlockOptin (the smallest of devices 0, 1)")
    idle = of_trace(load_trace(_two_devices(tmp_path, {"sharedMemPerBlockOptin": 1_000}, kernels_on=(0,))))
    assert idle.smem_limit == 232_448  # a listed device no kernel ran on does not count
    with pytest.raises(TuneproofError, match=r"ran kernels on devices of capability 9.0 and 12.0: one "):
        of_trace(load_trace(_two_devices(tmp_path, {"computeMajor": 12, "computeMinor": 0})))
    with pytest.raises(TuneproofError, match=r"kernels ran on device 3, which its deviceProperties do not"):
        of_trace(load_trace(_two_devices(tmp_path, {}, kernels_on=(0, 3))))
    with pytest.raises(TuneproofError, match=r"list one device id twice: which card ran what is unknown"):
        of_trace(load_trace(_two_devices(tmp_path, {"id": 0, "sharedMemPerBlockOptin": 101_376})))
    named = json.loads(_two_devices(tmp_path, {}).read_text())  # device ids as strings, or null
    named["traceEvents"] = [
        {**e, "args": {"device": d}} for e, d in zip(named["traceEvents"], ["0", None], strict=True)
    ]
    (tmp_path / "named.json").write_text(json.dumps(named))
    assert of_trace(load_trace(tmp_path / "named.json")).smem_limit == 232_448


def test_a_malformed_capability_or_name_in_a_trace(tmp_path) -> None:
    with pytest.raises(TuneproofError) as e:
        of_trace(load_trace(_trace_like(tmp_path, H800, computeMajor=9.5)))
    assert "NVIDIA H800 has computeMajor 9.5, computeMinor 0: not a compute capability" in e.value.message
    escaped = of_trace(load_trace(_trace_like(tmp_path, H800, name="NVIDIA \x1b[31mH800")))
    assert "\x1b" not in (escaped.smem_source or "") and "NVIDIA [31mH800" in (escaped.smem_source or "")


def test_explain_still_explains_where_no_flex_option_fits_the_card(capsys) -> None:
    """A T4 (65,536 B) at head_dim 512 in fp32: no flex block size fits; the SDPA dispatch is explained,
    and the advice says flex cannot run here rather than advising it."""
    config = str(Path(__file__).parent.parent.parent / "examples" / "gemma4-26b-a4b-like" / "config.json")
    argv = ["explain", "--config", config, "--seq-len", "4096", "--padded", "--batch", "2", "--gpu", "T4"]
    assert main([*argv, "--dtype", "fp32", "--training", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [x["backend"] for x in out["layers"]] and out["flex_kernel_options"]["fwd"]["options"] is None
    assert out["flex_kernel_options"]["fwd"]["reason"].startswith("no flex block size fits 65,536 B")
    advice = " ".join(out["advice"])
    assert "flex_attention would skip the blocks outside the window, but cannot run on this card" in advice
    assert "use flex_attention" not in advice and "nor can flex_attention on this card" in advice
    assert main([*argv, "--dtype", "fp32", "--attn", "flex_attention"]) == 0
    assert "flex_attention cannot run on this card" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (DATA / "hta" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz", "(ROCm, gfx9 family"),
        (DATA / "cpu_tiny_sdpa.json.gz", "CPU only (no deviceProperties in the trace and no device rows)"),
    ],
)
def test_a_trace_from_no_cuda_device_is_refused(path: Path, message: str) -> None:
    with pytest.raises(TuneproofError) as e:
        of_trace(load_trace(path))
    assert message in e.value.message and "no CUDA compute capability to explain for" in e.value.message


def test_a_trace_from_a_capability_without_rules_names_the_trace(tmp_path) -> None:
    pascal = _trace_like(tmp_path, V100, computeMajor=6, computeMinor=1, name="Tesla P40")
    with pytest.raises(TuneproofError) as e:
        of_trace(load_trace(pascal))
    assert e.value.fields == ("trace", "capability")
    assert e.value.message.startswith(
        "trace trace.json ran on Tesla P40 (compute capability 6.1), a capability tuneproof has no rules for"
    )


def test_one_device_source_at_a_time_and_the_named_rows_limit(monkeypatch) -> None:
    with pytest.raises(TuneproofError, match=r"gpu and trace together \(give one of them\)"):
        card("H100", trace=H800)
    with pytest.raises(TuneproofError, match=r"capability and gpu and trace together"):
        card("H100", capability="9.0", trace=H800)
    assert card(None) == CPU
    table = ((9, 0), 232_448, "the capability 9.0 table")
    assert _device(card(None, capability="sm_90")) == _device(card(" 9.0 ")) == table  # a capability as a GPU
    assert _device(card("sm_90a")) == table  # arch-specific (a) and family (f) suffixes
    for bad, message in [
        ("99.9", "unknown gpu '99.9'"),
        ("sm_75x", "unknown gpu 'sm_75x'"),
        (" ", "gpu is empty"),
    ]:
        with pytest.raises(TuneproofError, match=message):
            card(bad)
    row = card("L4")
    assert (row.capability, row.smem_limit, row.smem_source) == (
        (8, 9),
        101_376,
        "the L4 row of the GPU table",
    )


def test_auto_takes_the_devices_own_limit(monkeypatch) -> None:
    from fakes import fake_cuda_device

    fake_cuda_device(monkeypatch, "NVIDIA GeForce RTX 4090", (8, 9), 101_000)
    t = card("auto")
    assert (t.capability, t.smem_limit) == ((8, 9), 101_000)
    assert t.smem_source == "this device: torch's shared_memory_per_block_optin"
    fake_cuda_device(monkeypatch, "Tesla T4", (7, 5), None)  # torch without the field: the table's limit
    assert _device(card("auto")) == (
        (7, 5),
        65_536,
        "the capability 7.5 table; torch reports no shared_memory_per_block_optin for this device",
    )


def _device(c: Any) -> tuple[Any, ...]:
    """What the dispatch and flex's options read of a card."""
    return (c.capability, c.smem_limit, c.smem_source)


def test_a_named_card_holds_its_memory_and_auto_this_devices(monkeypatch) -> None:
    from fakes import fake_cuda_device

    assert card("H100").total_bytes == 80 * 2**30 and "datasheet" in str(card("H100").memory_source)
    assert card("A100 80GB").name == "A100 80GB" and card("A100 40GB").total_bytes == 40 * 2**30
    ambiguous = card("A100")  # the dispatch needs no size; the memory ledger refuses to guess it
    assert ambiguous.capability == (8, 0) and ambiguous.total_bytes is None
    with pytest.raises(TuneproofError, match="ships with 40 GB or 80 GB"):
        ambiguous.memory()
    assert card(None, capability="9.0").total_bytes is None  # a capability names no memory
    given = card("A100", memory_gib=40)
    assert (given.name, given.total_bytes, given.capability) == ("A100", 40 * 2**30, (8, 0))
    fake_cuda_device(monkeypatch, "NVIDIA GeForce RTX 4090", (8, 9), 101_000)
    assert card("auto").name == "NVIDIA GeForce RTX 4090" and card("auto").row.name == "RTX 4090"
