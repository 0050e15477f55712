"""The attention implementations a run may name (transformers' `attn_implementation`, as a config, a
Trainer's model or an Axolotl YAML gives it), and the attention path each one runs: one table of rules,
read by every reader of a run (the Axolotl YAML, a recipe, the callback reading a live model).

transformers 5.24 accepts (modeling_utils `_check_and_adjust_attn_implementation`,
`AttentionInterface.get_interface`): eager, sdpa, flash_attention_2/3/4, flex_attention, `paged|eager`,
any `paged|X` (the prefix is dropped, with a FutureWarning), and a hub kernel `org/repo[@rev][:fn]`
(integrations/hub_kernels `is_kernel`), which `load_and_register_attn_kernel` registers with the flash
mask and `flash_attention_forward` when the kernel exposes `flash_attn_varlen_func` (the flash-attn
builds of kernels-community), else with SDPA's mask and the kernel's own forward. A model may register
more names of its own (`doge_flex_attention`); Axolotl registers its own (xformers, sage, s2).

An implementation no rule here models is priced as the `unknown` path, with a note: never as the
nearest known one, never refused (a run tuneproof cannot model is still a run).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from tuneproof.runs.step import ATTENTION_PATHS, UNKNOWN_PATH

# transformers' FlashAttention builds that run its flash path (flash_attention_forward with
# masking_utils.flash_attention_mask: ALL_MASK_ATTENTION_FUNCTIONS maps 2, 3 and 4 alike)
FLASH_BUILDS = ("flash_attention_3", "flash_attention_4")
# transformers' integrations/hub_kernels.is_kernel: org/repo, an optional @revision, an optional :function
HUB_KERNEL = re.compile(r"^[^/:]+/[^/:]+(?:@[^/:]+)?(?::[^/:]+)?$")
PAGED = "paged|"


@dataclass(frozen=True, slots=True)
class Implementation:
    """What an `attn_implementation` runs: `path`, one of `runs.step.PRICED_PATHS` (`unknown` where no
    rule models it), and `note`, how it was mapped (None: the name is the path)."""

    name: str | None
    path: str
    note: str | None = None

    @property
    def known(self) -> bool:
        return self.path != UNKNOWN_PATH


def _paged(name: str) -> Implementation | None:
    if not name.startswith(PAGED):
        return None
    if name == "paged|eager":
        return Implementation(
            name, "eager", "paged|eager is transformers' eager_paged_attention_forward: eager's score matrix"
        )
    inner = implementation(name.removeprefix(PAGED))
    why = "transformers 5.24 drops the paged| prefix (AttentionInterface.get_interface)"
    return Implementation(name, inner.path, f"{why}: {inner.note or inner.path}")


def _flash_build(name: str) -> Implementation | None:
    if name not in FLASH_BUILDS:
        return None
    return Implementation(
        name,
        "flash_attention_2",
        f"{name} runs transformers' flash path (flash_attention_forward, the flash mask): costed as "
        "flash_attention_2",
    )


def _hub_kernel(name: str) -> Implementation | None:
    if not HUB_KERNEL.match(name):
        return None
    repo = name.split(":", 1)[0].split("@", 1)[0]
    if "flash" in repo.rpartition("/")[2]:
        return Implementation(
            name,
            "flash_attention_2",
            f"{name} is a hub FlashAttention build: transformers wraps its flash_attn_varlen_func in "
            "flash_attention_forward with the flash mask (hub_kernels.load_and_register_attn_kernel): "
            "costed as flash_attention_2",
        )
    return Implementation(
        name,
        UNKNOWN_PATH,
        f"{name} is a hub kernel tuneproof does not model (what it computes and keeps depends on the "
        "kernel): its attention is priced as unknown",
    )


# Ordering rule: the prefix is read first (paged|X maps as X), then transformers' own builds, then the
# hub's; the first rule that answers wins.
RULES: tuple[Callable[[str], Implementation | None], ...] = (_paged, _flash_build, _hub_kernel)


def implementation(name: str | None) -> Implementation:
    """The path `name` runs, and how it was mapped. None is transformers' default (sdpa)."""
    if name is None:
        return Implementation(None, "sdpa", "no attention option: transformers' default, sdpa")
    if not isinstance(name, str):
        return Implementation(None, UNKNOWN_PATH, f"attention implementation {name!r} is not a name")
    if name in ATTENTION_PATHS:
        return Implementation(name, name)
    for rule in RULES:
        found = rule(name)
        if found is not None:
            return found
    return Implementation(
        name,
        UNKNOWN_PATH,
        f"{name} is not an attention implementation tuneproof models: its attention is priced as unknown",
    )
