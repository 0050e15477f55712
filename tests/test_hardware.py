from __future__ import annotations

import pytest

from tuneproof.errors import TuneproofError
from tuneproof.hardware import GPUS, SMEM_SM86_89_120, SMEM_SM90_100, lookup_gpu, peak_for

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
]


@pytest.mark.parametrize("name", REQUIRED)
def test_required_gpus_are_in_the_table(name: str) -> None:
    gpu = lookup_gpu(name)
    assert gpu.peak_tflops["bf16"] > 0 and gpu.source


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
        ("NVIDIA H200", "H200"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),
    ],
)
def test_lookup_by_reported_name(reported: str, expected: str) -> None:
    assert lookup_gpu(reported).name == expected


KNOWN = (
    "H100 PCIe, H100 NVL, H100 SXM, GH200, H200 NVL, H200, GB200, B200, RTX PRO 6000 Blackwell Max-Q, "
    "RTX PRO 6000 Blackwell, RTX 5090, RTX 4090, L40S, L4, A10G, A100"
)


def test_unknown_gpu_gives_no_fallback() -> None:
    """Each caller says what the name was for: the peak (MFU) or the capability (dispatch); a fresh-eyes
    trial saw `explain --gpu foo` answer 'no MFU', though explain computes none."""
    from tuneproof.attention.dispatch import device_capability
    from tuneproof.hardware import resolve_peak

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
        device_capability(None, name)
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
    assert all(g.aliases and g.capability[0] >= 8 for g in GPUS)


def test_contested_values_carry_their_note_into_the_peak_source() -> None:
    p = peak_for(lookup_gpu("NVIDIA GB200"), "bf16")
    assert p.tflops == 2500.0 and "contested" in (p.source or "") and "2250" in (p.source or "")


def test_table_constants_the_case_and_the_mfu_depend_on() -> None:
    """Pinned by value: a typo in a peak is an MFU off by 10x that no other test would notice."""
    expected = {
        "H100 SXM": 989.0,
        "H100 PCIe": 756.0,
        "H100 NVL": 835.0,
        "H200": 989.0,
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
    }
    assert {g.name: g.peak_tflops["bf16"] for g in GPUS} == expected
    assert {g.name: g.capability for g in GPUS}["RTX PRO 6000 Blackwell"] == (12, 0)
    assert lookup_gpu("H100").peak_tflops["fp8"] == 1979.0


def test_resolve_peak_policy_and_reasons() -> None:
    from tuneproof.hardware import Peak, resolve_peak

    given = resolve_peak("A100", "bf16", peak_tflops=100.0)
    assert (given.tflops, given.source) == (100.0, "user-given peak")
    table = resolve_peak("NVIDIA A100-SXM4-80GB", "bf16")
    assert table.tflops == 312.0 and "A100" in (table.source or "")
    none = resolve_peak(None, "bf16")
    assert none.tflops is None and "no GPU named" in (none.reason or "")
    measured = resolve_peak("A100", "fp8", measure=lambda: Peak(1.5, "measured peak (x)", "fp8"))
    assert measured.tflops == 1.5 and "no dense fp8 peak known for A100" in (measured.reason or "")
    unknown = resolve_peak("Voodoo 5", "bf16", measure=lambda: Peak(0.5, "measured peak (x)", "bf16"))
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


@pytest.mark.parametrize("name", ["L4X", "A1000", "NVIDIA", "", "h1000", "RTX 40900"])
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
    assert missing.reason == "no dense fp8 peak known for RTX PRO 6000 Blackwell (table has ['bf16', 'fp16'])"


def test_resolve_peak_returns_exactly_what_it_says() -> None:
    from tuneproof.hardware import Peak, resolve_peak

    measured = Peak(1.5, "measured peak (cpu, fp32 GEMM)", "fp32")
    assert resolve_peak(None, "bf16", measure=lambda: measured) == Peak(
        1.5, "measured peak (cpu, fp32 GEMM)", "fp32", "no GPU named: measured instead"
    )
    assert resolve_peak("Voodoo 5", "fp32", measure=lambda: measured) == Peak(
        1.5, "measured peak (cpu, fp32 GEMM)", "fp32", "GPU 'Voodoo 5' is not in the table: measured instead"
    )
    assert resolve_peak(None, "torch.bfloat16") == Peak(
        None, None, "bf16", "no GPU named: give a GPU name or a peak in TFLOP/s"
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
    from tuneproof.hardware import check_dtype

    assert check_dtype(given) == expected


@pytest.mark.parametrize("bad", ["torch.int3", "bfloat16.torch", 16, None])
def test_unknown_dtypes_name_the_known_ones(bad: object) -> None:
    from tuneproof.hardware import check_dtype

    with pytest.raises(TuneproofError) as e:
        check_dtype(bad)
    assert e.value.message == f"dtype {bad!r} is not known (use one of: bf16, fp16, fp8, fp4, tf32, fp32)"
