from __future__ import annotations

import pytest

from fakes import fake_cuda_device
from tuneproof.core.errors import TuneproofError
from tuneproof.hardware.capability import SMEM_SM86_89_120, SMEM_SM90_100
from tuneproof.hardware.gpus import GPUS, lookup_gpu, peak_for

REQUIRED = [
    "A100",
    "A10G",
    "L4",
    "L40S",
    "RTX 4090",
    "H100 SXM",
    "H100 PCIe",
    "H200",
    "GH200",
    "B200",
    "GB200",
    "RTX 5090",
    "RTX PRO 6000 Blackwell",
    "T4",
    "V100",
    "A10",
    "MI300X",
]


@pytest.mark.parametrize("name", REQUIRED)
def test_required_gpus_are_in_the_table(name: str) -> None:
    gpu = lookup_gpu(name)
    assert max(gpu.peak_tflops["bf16" if "bf16" in gpu.peak_tflops else "fp16"], 0) > 0 and gpu.source


@pytest.mark.parametrize(
    "reported,expected",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 5090", "RTX 5090"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTX PRO 6000 Blackwell Max-Q"),
        ("NVIDIA H200", "H200 SXM"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("NVIDIA A10", "A10"),
        ("AMD Instinct MI300X", "MI300X"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),
    ],
)
def test_lookup_by_reported_name(reported: str, expected: str) -> None:
    assert lookup_gpu(reported).name == expected


KNOWN = (
    "H100 PCIe, H100 NVL, H100 SXM, GH200, H200 NVL, H200 SXM, GB200, B200, RTX PRO 6000 Blackwell Max-Q, "
    "RTX PRO 6000 Blackwell, RTX 5090, RTX 4090, L40S, L4, A10G, A10, A100, T4, V100 PCIe, V100 SXM2, MI300X"
)


def test_unknown_gpu_gives_no_fallback() -> None:
    """Each caller says what the name was for: the peak (MFU) or the capability (dispatch); a fresh-eyes
    trial saw `explain --gpu foo` answer 'no MFU', though explain computes none."""
    from tuneproof.hardware.card import card
    from tuneproof.hardware.gpus import resolve_peak

    name = "NVIDIA GeForce RTX 3070 Ti"
    with pytest.raises(TuneproofError) as e:
        lookup_gpu(name)
    assert e.value.message == f"unknown GPU '{name}' (gpu) (use one of: {KNOWN})"  # fields, not flags
    with pytest.raises(TuneproofError) as e:
        resolve_peak(name, "bf16")
    assert e.value.message == (
        f"unknown GPU '{name}' (gpu): no MFU without a trusted peak (use one of: {KNOWN}; "
        "or give peak_tflops)"
    )
    with pytest.raises(TuneproofError) as e:
        card(name)
    assert e.value.message == (
        f"unknown GPU '{name}' (gpu): its compute capability is not known (use one of: {KNOWN}; "
        "or give capability, e.g. 9.0)"
    )


def test_unknown_dtype_gives_no_peak_with_reason() -> None:
    p = peak_for(lookup_gpu("A100"), "fp8")
    assert p.tflops is None and "fp8" in (p.reason or "")


def test_capabilities_and_shared_memory() -> None:
    assert lookup_gpu("RTX PRO 6000 Blackwell").capability == (12, 0)
    assert lookup_gpu("RTX PRO 6000 Blackwell").smem_per_block_optin == SMEM_SM86_89_120 == 101_376
    assert lookup_gpu("H100").smem_per_block_optin == SMEM_SM90_100 == 232_448
    assert lookup_gpu("T4").capability == (7, 5) and lookup_gpu("T4").smem_per_block_optin == 65_536
    assert lookup_gpu("V100").capability == (7, 0) and lookup_gpu("V100").smem_per_block_optin == 98_304
    assert lookup_gpu("A100").smem_per_block_optin == 166_912
    assert lookup_gpu("MI300X").capability is None and lookup_gpu("MI300X").smem_per_block_optin == 65_536
    assert all(g.aliases for g in GPUS)


def test_contested_values_carry_their_note_into_the_peak_source() -> None:
    p = peak_for(lookup_gpu("NVIDIA GB200"), "bf16")
    assert p.tflops == 2500.0 and "contested" in (p.source or "") and "2250" in (p.source or "")
    assert "DGX GB200 page" in (p.source or "") and "\n" not in (p.source or "")


def test_table_constants_the_case_and_the_mfu_depend_on() -> None:
    """Pinned by value: a typo in a peak is an MFU off by 10x that no other test would notice."""
    expected = {
        "H100 SXM": 989.0,
        "H100 PCIe": 756.0,
        "H100 NVL": 835.0,
        "H200 SXM": 989.0,
        "GH200": 989.0,
        "H200 NVL": 835.0,
        "B200": 2250.0,
        "GB200": 2500.0,
        "A100": 312.0,
        "L40S": 362.05,
        "L4": 121.0,
        "A10G": 125.0,
        "RTX 4090": 165.2,
        "RTX 5090": 209.5,
        "RTX PRO 6000 Blackwell": 503.8,
        "RTX PRO 6000 Blackwell Max-Q": 438.9,
        "A10": 125.0,
        "MI300X": 1307.4,
        "T4": None,  # no BF16 tensor cores
        "V100 PCIe": None,
        "V100 SXM2": None,
    }
    assert {g.name: g.peak_tflops.get("bf16") for g in GPUS} == expected
    fp16 = {"T4": 65.0, "V100 PCIe": 112.0, "V100 SXM2": 125.0, "MI300X": 1307.4}
    assert {n: lookup_gpu(n).peak_tflops["fp16"] for n in fp16} == fp16
    fp8 = {"L4": 242.0, "L40S": 733.0, "RTX 5090": 419.0, "MI300X": 2614.9, "B200": 4500.0, "GB200": 5000.0}
    assert {n: lookup_gpu(n).peak_tflops["fp8"] for n in fp8} == fp8
    fp4 = {"RTX 5090": 1676.0, "B200": 9000.0, "GB200": 10000.0}
    assert {n: lookup_gpu(n).peak_tflops["fp4"] for n in fp4} == fp4
    assert {g.name: g.capability for g in GPUS}["RTX PRO 6000 Blackwell"] == (12, 0)
    assert lookup_gpu("H100").peak_tflops["fp8"] == 1979.0


def test_resolve_peak_policy_and_reasons() -> None:
    from tuneproof.hardware.gpus import Peak, resolve_peak

    given = resolve_peak("A100", "bf16", peak_tflops=100.0)
    assert (given.tflops, given.source) == (100.0, "user-given peak")
    table = resolve_peak("NVIDIA A100-SXM4-80GB", "bf16")
    assert table.tflops == 312.0 and "A100" in (table.source or "")
    none = resolve_peak(None, "bf16")
    assert none.tflops is None and "no GPU named" in (none.reason or "")
    measured = resolve_peak(
        "A100", "fp8", measure=lambda: Peak(tflops=1.5, source="measured peak (x)", dtype="fp8")
    )
    assert measured.tflops == 1.5 and "no dense fp8 peak known for A100" in (measured.reason or "")
    unknown = resolve_peak(
        "Voodoo 5", "bf16", measure=lambda: Peak(tflops=0.5, source="measured peak (x)", dtype="bf16")
    )
    assert unknown.tflops == 0.5 and "not in the table: measured instead" in (unknown.reason or "")
    with pytest.raises(TuneproofError, match="unknown GPU 'Voodoo 5'"):
        resolve_peak("Voodoo 5", "bf16")
    for bad in (float("nan"), float("inf"), 0.0, -3.0):
        with pytest.raises(TuneproofError, match="peak_tflops"):
            resolve_peak(None, "bf16", peak_tflops=bad)
    with pytest.raises(TuneproofError, match="dtype 'int3' is not known"):
        resolve_peak("A100", "int3")


@pytest.mark.parametrize(
    "reported,expected",
    [
        ("nvidia_h100_pcie", "H100 PCIe"),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Max-Q", "RTX PRO 6000 Blackwell Max-Q"),
        ("Tesla A100-PCIE-40GB", "A100"),
        ("  NVIDIA   L40S  ", "L40S"),
        ("h200 nvl", "H200 NVL"),
        ("GeForce RTX 4090", "RTX 4090"),
    ],
)
def test_name_normalisation(reported: str, expected: str) -> None:
    assert lookup_gpu(reported).name == expected


@pytest.mark.parametrize(
    "name", ["L4X", "A1000", "NVIDIA", "", "h1000", "RTX 40900", "Tesla V100S-PCIE-32GB", "T40", "MI300A"]
)
def test_near_misses_are_unknown(name: str) -> None:
    with pytest.raises(TuneproofError, match="unknown GPU"):
        lookup_gpu(name)


def test_peak_for_reports_source_note_and_missing_dtypes() -> None:
    h100 = lookup_gpu("H100")
    p = peak_for(h100, "bfloat16")
    assert (p.tflops, p.dtype, p.reason) == (989.0, "bf16", None)
    assert p.source == f"H100 SXM: {h100.source}"
    missing = peak_for(lookup_gpu("RTX PRO 6000 Blackwell"), "fp8")
    assert missing.tflops is None and missing.source is None and missing.dtype == "fp8"
    assert (
        missing.reason
        == "no dense fp8 peak known for RTX PRO 6000 Blackwell (its table has bf16 503.8, fp16 503.8 TFLOP/s)"
    )


def test_resolve_peak_returns_exactly_what_it_says() -> None:
    from tuneproof.hardware.gpus import Peak, resolve_peak

    measured = Peak(tflops=1.5, source="measured peak (cpu, fp32 GEMM)", dtype="fp32")
    assert resolve_peak(None, "bf16", measure=lambda: measured) == Peak(
        tflops=1.5,
        source="measured peak (cpu, fp32 GEMM)",
        dtype="fp32",
        reason="no GPU named: measured instead",
    )
    assert resolve_peak("Voodoo 5", "fp32", measure=lambda: measured) == Peak(
        tflops=1.5,
        source="measured peak (cpu, fp32 GEMM)",
        dtype="fp32",
        reason="GPU 'Voodoo 5' is not in the table: measured instead",
    )
    assert resolve_peak(None, "torch.bfloat16") == Peak(
        tflops=None, source=None, dtype="bf16", reason="no GPU named: give a GPU name or a peak in TFLOP/s"
    )
    with pytest.raises(TuneproofError) as e:
        resolve_peak(None, "bf16", peak_tflops=-1.0)
    assert e.value.message == "peak_tflops must be >= 1e-06, got -1 (pass dense TFLOP/s, e.g. 989)"


@pytest.mark.parametrize(
    "given,expected",
    [
        (" Torch.BFloat16 ", "bf16"),
        ("float16", "fp16"),
        ("half", "fp16"),
        ("FP32", "fp32"),
        ("fp8_e4m3", "fp8"),
    ],
)
def test_dtype_names(given: str, expected: str) -> None:
    from tuneproof.core.dtypes import check_dtype

    assert check_dtype(given) == expected


@pytest.mark.parametrize("bad", ["torch.int3", "bfloat16.torch", 16, None])
def test_unknown_dtypes_name_the_known_ones(bad: object) -> None:
    from tuneproof.core.dtypes import check_dtype

    with pytest.raises(TuneproofError) as e:
        check_dtype(bad)
    assert e.value.message == f"dtype {bad!r} is not known (use one of: bf16, fp16, fp8, fp4, tf32, fp32)"


def test_no_alias_shadows_another_row() -> None:
    """Every row is found by its own name, and the near names stay apart: A10 / A100 / A10G,
    L4 / L40S, B200 / GB200, H200 / GH200."""
    assert [lookup_gpu(g.name).name for g in GPUS] == [g.name for g in GPUS]
    for alias_of, name in [(g.name, a) for g in GPUS for a in g.aliases]:
        assert lookup_gpu(name).name == alias_of, name
    pairs = {"NVIDIA A10": "A10", "NVIDIA A100 80GB PCIe": "A100", "NVIDIA A10G": "A10G", "NVIDIA L4": "L4"}
    pairs |= {"NVIDIA L40S": "L40S", "NVIDIA B200": "B200", "NVIDIA GB200": "GB200", "NVIDIA GH200": "GH200"}
    assert {n: lookup_gpu(n).name for n in pairs} == pairs


@pytest.mark.parametrize(
    "name", ["NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA GeForce RTX 5090 Laptop GPU", "RTX 4090 Mobile"]
)
def test_laptop_parts_match_no_desktop_row(name: str) -> None:
    with pytest.raises(TuneproofError) as e:
        lookup_gpu(name)
    assert e.value.message.startswith(f"unknown GPU '{name}' (gpu): laptop parts are not in the table")


def test_no_bf16_tensor_cores_give_no_bf16_peak_with_the_reason() -> None:
    from tuneproof.hardware.gpus import resolve_peak

    t4 = resolve_peak("Tesla T4", "bf16")
    assert t4.tflops is None and "Turing (sm_75) has no BF16 tensor cores" in (t4.reason or "")
    v100 = resolve_peak("Tesla V100-SXM2-16GB", "bf16")
    assert v100.tflops is None and "Volta (sm_70) has no BF16 tensor cores" in (v100.reason or "")
    assert resolve_peak("Tesla T4", "fp16").tflops == 65.0


@pytest.mark.parametrize(
    "asked,note",
    [
        ("H100", "H100 -> H100 SXM (assumed; also H100 PCIe, H100 NVL: name the variant)"),
        ("h200", "h200 -> H200 SXM (assumed; also H200 NVL: name the variant)"),
        ("V100", "V100 -> V100 SXM2 (assumed; also V100 PCIe: name the variant)"),
        (
            "Tesla V100-SXM3-32GB",
            "Tesla V100-SXM3-32GB -> V100 SXM2 (assumed; also V100 PCIe: name the variant)",
        ),
        (
            "RTX PRO 6000 Blackwell",
            "RTX PRO 6000 Blackwell (assumed; also RTX PRO 6000 Blackwell Max-Q: name the variant)",
        ),
        ("NVIDIA H100 80GB HBM3", None),  # the SXM part's own name: nothing assumed
        ("H100 SXM", None),
        ("NVIDIA H200", None),
        ("NVIDIA H100 PCIe", None),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", None),
        ("NVIDIA L4", None),
        ("A100", None),
    ],
)
def test_a_family_name_names_the_variant_it_assumed(asked: str, note: str | None) -> None:
    from tuneproof.hardware.gpus import match_gpu

    assert match_gpu(asked).note == note


def test_the_assumed_variant_leads_the_peak_source_on_one_line() -> None:
    from tuneproof.hardware.gpus import resolve_peak

    p = resolve_peak("H100", "bf16")
    assert p.tflops == 989.0
    assert p.source == (
        "H100 -> H100 SXM (assumed; also H100 PCIe, H100 NVL: name the variant): NVIDIA H100 datasheet "
        "(SXM column); torchtitan get_peak_flops; torchao roofline_utils"
    )
    assert resolve_peak("NVIDIA H100 80GB HBM3", "bf16").source == f"H100 SXM: {lookup_gpu('H100').source}"


def test_flops_cli_prints_the_assumed_variant(capsys) -> None:
    from tuneproof.cli.app import main

    assert main(["flops", "--seq-len", "64", "--step-time", "0.1", "--gpu", "H100"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("peak:"))
    assert "(H100 -> H100 SXM (assumed; also H100 PCIe, H100 NVL: name the variant): NVIDIA H100" in line


def test_auto_picks_the_devices_row_and_reads_its_limit(monkeypatch) -> None:
    from tuneproof.hardware.card import card
    from tuneproof.hardware.gpus import device_smem_limit, match_gpu, resolve_peak

    fake_cuda_device(monkeypatch, "NVIDIA H200", (9, 0), 232_448)
    m = match_gpu("auto")
    assert (m.gpu.name, m.gpu.capability, m.gpu.smem_per_block_optin) == ("H200 SXM", (9, 0), 232_448)
    assert m.note == "auto (NVIDIA H200) -> H200 SXM"
    assert resolve_peak("auto", "bf16").source == f"auto (NVIDIA H200) -> H200 SXM: {m.gpu.source}"
    assert device_smem_limit() == 232_448 and card(" Auto ").capability == (9, 0)
    # the device's own numbers win over the table's
    fake_cuda_device(monkeypatch, "NVIDIA GeForce RTX 4090", (8, 9), 101_000)
    assert lookup_gpu("auto").smem_per_block_optin == 101_000
    # a card the table lacks: its capability still comes from the device; its peak is refused
    fake_cuda_device(monkeypatch, "NVIDIA GeForce RTX 3070 Ti", (8, 6), 101_376)
    assert card("auto").capability == (8, 6)
    with pytest.raises(TuneproofError) as e:
        resolve_peak("auto", "bf16")
    assert e.value.message.startswith("unknown GPU 'NVIDIA GeForce RTX 3070 Ti', this device (gpu): no MFU")
    # torch without the field: the table's limit stands
    fake_cuda_device(monkeypatch, "Tesla T4", (7, 5), None)
    assert device_smem_limit() is None and lookup_gpu("auto").smem_per_block_optin == 65_536


def test_auto_on_rocm_has_no_cuda_capability(monkeypatch) -> None:
    """ROCm's torch reports gfx942 as (9, 4) (the recorded MI250 trace says 9.0): not a CUDA capability."""
    from tuneproof.hardware.card import card
    from tuneproof.hardware.gpus import capability_of

    fake_cuda_device(monkeypatch, "AMD Instinct MI300X", (9, 4), 65_536, hip="6.2")
    assert lookup_gpu("auto").name == "MI300X" and lookup_gpu("auto").capability is None
    rocm = r"auto \(AMD Instinct MI300X\) \(gpu\) is a ROCm GPU: it has no CUDA compute capability"
    with pytest.raises(TuneproofError, match=rocm):
        card("auto")
    with pytest.raises(
        TuneproofError, match=r"MI300X \(gpu\) is a ROCm GPU: it has no CUDA compute capability"
    ):
        capability_of("MI300X")


def test_auto_without_cuda_is_one_line(monkeypatch, capsys) -> None:
    import torch

    from tuneproof.cli.app import main
    from tuneproof.hardware.gpus import device_smem_limit

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(TuneproofError) as e:
        lookup_gpu("auto")
    assert e.value.message == "gpu auto needs a CUDA device; torch sees none here (name the GPU, e.g. H100)"
    assert device_smem_limit() is None
    for argv in (["flops", "--seq-len", "8", "--step-time", "1"], ["explain", "--seq-len", "8"]):
        assert main([*argv, "--gpu", "auto"]) == 2
        err = capsys.readouterr().err
        assert (
            err == "error: --gpu auto needs a CUDA device; torch sees none here (name the GPU, e.g. H100)\n"
        )


def test_a_traces_limit_reads_as_the_devices_does(monkeypatch) -> None:
    """sharedMemPerBlockOptin in recorded traces (V100, RTX PRO 6000) is the table's limit for that
    card, and an int like `device_smem_limit`'s."""
    from pathlib import Path

    from tuneproof.commands import kernels
    from tuneproof.hardware.card import of_trace
    from tuneproof.trace.read import load_trace

    data = Path(__file__).parent.parent / "data"
    for trace in (data / "hta" / "ns_resolution_rank-0.json.gz", data / "case_sm120.json.gz"):
        t = kernels.run(kernels.prepare(kernels.KernelsSpec(trace=trace)))
        name = (t.device or {})["description"].split(" (")[0]
        assert of_trace(load_trace(trace)).smem_limit == lookup_gpu(name).smem_per_block_optin, name


def test_peak_sets_the_cards_datasheet_beside_the_measurement(monkeypatch, capsys) -> None:
    """`tuneproof peak --gpu`: the table peak (its assumed variant named) and the measured share of it;
    the measurement itself is faked (a cuda GEMM here would need a GPU)."""
    import json

    from tuneproof.cli.app import main
    from tuneproof.commands import peak as area

    fake_cuda_device(monkeypatch, "NVIDIA H100 80GB HBM3", (9, 0), 232_448)
    fake = area.MeasuredPeak(
        tflops=741.75, device="cuda", dtype="bf16", size=8192, median_s=1.5e-3, iqr_s=1e-5, runs=40
    )
    monkeypatch.setattr(
        area, "run", lambda plan, progress=None: area.replace(fake, table=area._table_peak(plan))
    )
    assert main(["peak", "--device", "cuda", "--gpu", "H100"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        "table peak: 989 TFLOP/s dense bf16 (H100 -> H100 SXM (assumed; also H100 PCIe, H100 NVL: name the "
        "variant): NVIDIA H100 datasheet (SXM column); torchtitan get_peak_flops; torchao roofline_utils): "
        "measured is 75.0 % of it"
    )
    assert main(["peak", "--device", "cuda", "--gpu", "auto", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["share_of_table"] == pytest.approx(0.75) and d["table_peak"]["source"].startswith(
        "auto (NVIDIA H100 80GB HBM3) -> H100 SXM: "
    )
    assert main(["peak", "--device", "cuda", "--gpu", "T4"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith(
        "table peak: none (no dense bf16 peak known for T4 (its table has fp16 65 TFLOP/s): Turing"
    )


def test_the_callbacks_auto_is_the_device_the_model_is_on(monkeypatch) -> None:
    import torch

    from tuneproof.train.read_run import _peak

    assert _peak("auto", None, torch.bfloat16, torch.device("cpu")) == (
        None,
        "no peak for a cpu device (pass gpu= or peak_tflops=)",
    )
    fake_cuda_device(monkeypatch, "NVIDIA H200", (9, 0), 232_448)
    monkeypatch.setattr(
        torch.cuda,
        "get_device_name",
        lambda d=0: "NVIDIA H200" if getattr(d, "index", d) == 1 else "Tesla T4",
    )
    tflops, source = _peak("auto", None, torch.bfloat16, torch.device("cuda", 1))
    assert (tflops, source.split(":")[0]) == (989.0, "H200 SXM")
