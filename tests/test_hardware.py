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


def test_unknown_gpu_gives_no_fallback() -> None:
    with pytest.raises(TuneproofError) as e:
        lookup_gpu("NVIDIA GeForce RTX 3070 Ti")
    assert "H100 SXM" in e.value.message and "--peak-tflops" in e.value.message


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
