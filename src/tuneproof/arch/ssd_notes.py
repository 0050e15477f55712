"""The dispatch explainer's line for Mamba-2 SSD cores (`StateSpace`): which kernels transformers
offers for them and the torch path it takes without them.

Source (transformers 5.x models/mamba2/modeling_mamba2.py, copied unchanged into bamba,
granitemoehybrid, nemotron_h, zamba2 and falcon_h1): `causal_conv1d_fn` / `causal_conv1d_update`
(package causal-conv1d) and `mamba_split_conv1d_scan_combined`, `mamba_chunk_scan_combined`,
`selective_state_update` (package mamba-ssm) are `use_kernel_func_from_hub_with_fallback` functions:
the kernels hub's kernels-community/mamba-ssm and causal-conv1d builds (integrations/hub_kernels.py)
or the installed packages on CUDA. Training without a cache first calls
`mamba_split_conv1d_scan_combined` (convolution, scan, gated norm and out_proj in one kernel); its
fallback returns None, and the mixer then runs the torch path: a depthwise F.conv1d and
`mamba2_chunk_scan` (`tuneproof.arch.mixers.ssd_flops`). No mixer passes a `seq_idx`, so a packed
batch's documents share one state on every path.

The lines cover every layer holding an SSD core, also those where it runs beside or after softmax
attention (Falcon-H1, Zamba2's hybrid layers), which `ModelShape.mixer_groups` does not list.
"""

from __future__ import annotations

from tuneproof.arch.shape import ModelShape, StateSpace

_SSD_PATHS = (
    "{count} Mamba-2 SSD cores ({label}): the attention path does not apply to them. transformers runs "
    "mamba-ssm's mamba_split_conv1d_scan_combined (training without a cache: convolution, scan, gated "
    "norm and out_proj fused) or mamba_chunk_scan_combined, and causal-conv1d's causal_conv1d_fn, where "
    "the kernels hub or the mamba-ssm / causal-conv1d packages provide them (CUDA); else the torch "
    "fallback: a depthwise F.conv1d and mamba2_chunk_scan (chunks of {chunk} tokens, padded to a whole "
    "chunk, the inter-chunk state einsum quadratic in the chunk count){packed}"
)
_SSD_PACKED = (
    "; this batch is packed, and no path is given its document boundaries (the mixer passes no "
    "seq_idx), so its documents share one recurrent state and one convolution window"
)


def ssd_notes(shape: ModelShape, packed: bool) -> list[str]:
    """One line per SSD geometry of `shape`, with how many layers hold such a core."""
    groups: dict[StateSpace, int] = {}
    for layer in shape.layers:
        for s in layer.steps:
            if isinstance(s, StateSpace):
                key = StateSpace(
                    q="",
                    k="",
                    v="",
                    dst="",
                    heads=s.heads,
                    head_dim=s.head_dim,
                    state=s.state,
                    chunk=s.chunk,
                    conv_channels=s.conv_channels,
                    conv_kernel=s.conv_kernel,
                )
                groups[key] = groups.get(key, 0) + 1
    return [
        _SSD_PATHS.format(
            count=count,
            label=f"h={ssd.heads} p={ssd.head_dim} n={ssd.state}",
            chunk=ssd.chunk,
            packed=_SSD_PACKED if packed else "",
        )
        for ssd, count in groups.items()
    ]
