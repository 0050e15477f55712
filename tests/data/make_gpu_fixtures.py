"""Writes the synthetic GPU trace fixtures (run once; the .json.gz files are checked in).

case_sm120.json.gz: the CASE's profile at w=16384 on an sm_120 card: attention 22,835.8 ms in
memory-efficient kernels built for sm80, dense GEMM 2,774.0 ms, other 5,739.0 ms, memory 3,675.4 ms.
zoo_sm90.json.gz: one kernel of each family the rule table knows, on an H100.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

HERE = Path(__file__).parent


def trace(device: dict, kernels: list[tuple[str, str, float]]) -> dict:
    events, ts = [], 1_000.0
    for cat, name, us in kernels:
        events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": ts,
                "dur": us,
                "args": {"device": 0, "stream": 7},
            }
        )
        ts += us + 1.0
    # a CPU launch row, which the device table must ignore
    events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 10.0,
            "dur": 5.0,
        }
    )
    return {"schemaVersion": 1, "deviceProperties": [device], "traceEvents": events}


def write(name: str, data: dict) -> None:
    (HERE / name).write_bytes(gzip.compress(json.dumps(data).encode(), mtime=0))


SM120 = {
    "id": 0,
    "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    "computeMajor": 12,
    "computeMinor": 0,
    "totalGlobalMem": 102_000_000_000,
    "sharedMemPerBlockOptin": 101376,
}
SM90 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0}

CASE = [
    ("kernel", "fmha_cutlassF_bf16_aligned_64x128_rf_sm80", 4_000_000.0),
    ("kernel", "fmha_cutlassB_bf16_aligned_128x64_k65536_sm80", 12_000_000.0),
    ("kernel", "fmha_cutlassF_bf16_aligned_32x128_gmem_sm80", 6_835_800.0),
    ("kernel", "nvjet_tst_256x128_64x4_2x1_v_bz_coopA_NNT", 1_774_000.0),
    ("kernel", "cutlass3x_sm120_tensorop_s16816gemm_bf16_128x128_32x3_tn_align8", 1_000_000.0),
    ("kernel", "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor>", 3_739_000.0),
    ("kernel", "void at::native::reduce_kernel<512, 1>", 2_000_000.0),
    ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 2_675_400.0),
    ("gpu_memset", "Memset (Device)", 1_000_000.0),
]

ZOO = [
    ("kernel", "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", 100.0),
    ("kernel", "void flash::flash_fwd_kernel<cute::tuple>(FlashAttnFwdSm90)", 100.0),
    ("kernel", "fmha_cutlassB_bf16_aligned_64x64_k128_sm80", 100.0),
    ("kernel", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128", 100.0),
    ("kernel", "triton_tem_fused_flex_attention_0", 100.0),
    ("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", 50.0),
    ("kernel", "nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_TNN", 50.0),
    (
        "kernel",
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>",
        50.0,
    ),
    ("kernel", "void at::cuda::detail::grouped_mm_kernel<bf16>", 50.0),
    ("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 30.0),
    ("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 20.0),
    ("gpu_memset", "Memset (Device)", 10.0),
    ("kernel", "triton_poi_fused_add_mul_0", 40.0),
]

if __name__ == "__main__":
    write("case_sm120.json.gz", trace(SM120, CASE))
    write("zoo_sm90.json.gz", trace(SM90, ZOO))
