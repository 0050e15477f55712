"""The layers of the code, bottom first (docs/contributing.md): `tests/contract/test_layers.py` holds
the imports to them, `tests/way.py` counts the way's moves back up them."""

from __future__ import annotations

LAYERS: tuple[tuple[str, ...], ...] = (  # bottom first
    ("core",),
    ("arch", "trace", "hardware", "runs"),
    ("flops", "data", "attention", "labels"),
    ("measure", "gate", "ship", "train", "preflight", "memory"),
    ("commands",),
    ("integrations",),
    ("cli",),
)
LAYER = {package: i for i, packages in enumerate(LAYERS) for package in packages}
