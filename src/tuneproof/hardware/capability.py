"""CUDA compute capabilities: the ones tuneproof has rules for, how a user writes one, and the per-block
opt-in shared memory each allows (`cudaDevAttrMaxSharedMemoryPerBlockOptin`, the limit Triton compares a
kernel's shared memory against). The one home of these facts: the GPU table (`gpus.py`) takes its rows'
limits from here, the dispatch rules their capabilities, flex's kernel options their limit.
"""

from __future__ import annotations

import re

from tuneproof.core.errors import TuneproofError

# Per-block opt-in shared memory, bytes, per architecture (CUDA Programming Guide, compute
# capabilities tables; Triton's "Hardware limit" values seen in the issues cited in the references).
SMEM_SM80 = 166_912  # 163 KB, A100 (CUDA guide sec. 20.7.3; FlashAttention #190)
SMEM_SM86_89_120 = 101_376  # 99 KB (CUDA guide; triton #384, pytorch #161376 RTX 5090 query)
SMEM_SM90_100 = 232_448  # 227 KB (pytorch #132075 "Hardware limit: 232448"; Blackwell tuning guide)
SMEM_SM70 = 98_304  # 96 KB, V100: a recorded Tesla V100-SXM2-32GB trace (tests/data/hta) says 98304
SMEM_SM75 = 65_536  # 64 KB, T4 (CUDA guide, 7.5, as recalled; vLLM PR #39018's Turing 64 KB): unverified
# AMD: LDS (local data share) per workgroup, what Triton on ROCm compares a kernel against.
LDS_GFX942 = 65_536  # 64 KB, MI300X (AMD CDNA 3 Instruction Set Architecture guide)
SMEM_FLOOR = 49_152  # 48 KiB per block: every CUDA card since Fermi; a trace's limit below it is not real

# The capabilities the dispatch rules (attention/rules.py) are written for.
KNOWN_CAPABILITIES = (
    (7, 0),
    (7, 5),
    (8, 0),
    (8, 6),
    (8, 7),
    (8, 9),
    (9, 0),
    (10, 0),
    (10, 3),
    (11, 0),
    (12, 0),
    (12, 1),
)

# Ordering rule: an exact capability first, then its major. Jetson Orin (8.7) takes sm80's 163 KB per
# block; the other 8.x parts (8.6, 8.9), 11.x and 12.x have 99 KB; Hopper and datacenter Blackwell 227 KB.
SMEM_BY_CAPABILITY = {(8, 0): SMEM_SM80, (8, 7): SMEM_SM80, (7, 0): SMEM_SM70, (7, 5): SMEM_SM75}
SMEM_BY_MAJOR = {
    9: SMEM_SM90_100,
    10: SMEM_SM90_100,
    8: SMEM_SM86_89_120,
    11: SMEM_SM86_89_120,
    12: SMEM_SM86_89_120,
}

CAPABILITY_TEXT = re.compile(r"\s*(\d+\.\d+|sm_?\d+[a-z]?)\s*", re.I)  # 9.0, sm_90: a capability


def smem_limit(capability: tuple[int, int]) -> int:
    """Per-block opt-in shared memory for a compute capability, from the table above."""
    major, minor = capability
    limit = SMEM_BY_CAPABILITY.get((major, minor), SMEM_BY_MAJOR.get(major))
    if limit is None:
        raise TuneproofError(
            f"no shared-memory limit known for capability {major}.{minor}", "pass smem_limit_bytes explicitly"
        )
    return limit


def known_text() -> str:
    """'7.0, 7.5, ...': the known capabilities as a user writes them."""
    return ", ".join(f"{a}.{b}" for a, b in KNOWN_CAPABILITIES)


def parse_capability(text: str) -> tuple[int, int]:
    """'12.0', 'sm_120', 'sm120', '9.0' -> (major, minor). Unknown values are refused."""
    t = text.strip().lower()
    m = re.fullmatch(r"(\d+)\.(\d)", t) or re.fullmatch(r"sm_?(\d+)(\d)[af]?", t)  # sm_90a, sm_100f
    cap = (int(m.group(1)), int(m.group(2))) if m else None
    if cap is None or cap not in KNOWN_CAPABILITIES:
        raise TuneproofError(
            f"unknown {{capability}} {text!r}",
            f"use MAJOR.MINOR or sm_XY, one of: {known_text()}",
            fields=("capability",),
        )
    return cap
