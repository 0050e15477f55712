"""Optional dependencies: one table of extras, and the check a command makes before any work.

`pip install tuneproof` brings what every reading and accounting command needs (torch, transformers,
numpy, scipy, safetensors, matplotlib, rich, click). Training, quantisation matching and embeddings
pull large stacks of their own, so they come as extras (`pip install 'tuneproof[train]'`).
"""

from __future__ import annotations

import importlib.util

from tuneproof.core.errors import TuneproofError

# extra -> the import names it brings (each is the distribution's top-level module)
EXTRAS: dict[str, tuple[str, ...]] = {
    "train": ("peft", "trl", "accelerate", "datasets"),  # tuneproof train, LoRA probes, adapters vs a base
    "quant": ("compressed_tensors", "yaml"),  # quant-audit: compressed-tensors' matcher, YAML recipes
    "embed": ("model2vec",),  # the gate's diversity metric on a local static embedder
    "sentence": ("sentence_transformers",),  # the same metric on a local sentence-transformers folder
    "axolotl": ("axolotl",),  # the Axolotl plugin runs inside Axolotl (tuneproof.integrations.axolotl)
}


def missing(extra: str, modules: tuple[str, ...] | None = None) -> list[str]:
    """The modules of `extra` (or just `modules` of it) that cannot be imported here."""
    names = EXTRAS[extra] if modules is None else modules
    assert set(names) <= set(EXTRAS[extra]), f"{names} are not all in the {extra!r} extra"
    return [m for m in names if importlib.util.find_spec(m) is None]


def require(extra: str, what: str, modules: tuple[str, ...] | None = None) -> None:
    """Refuse `what` (a command or an option) in one line naming the extra to install, when any of
    `modules` (default: the whole extra) is missing. Call it before any work starts."""
    gone = missing(extra, modules)
    if gone:
        raise TuneproofError(
            f"{what} needs {', '.join(gone)}, which {'is' if len(gone) == 1 else 'are'} not installed",
            f"pip install 'tuneproof[{extra}]'",
        )
