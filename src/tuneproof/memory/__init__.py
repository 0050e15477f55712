"""The memory ledger (issue 34): bytes per component of one training step.

So far: the bytes that live through the step (`tuneproof.memory.states`: weights, adapters, gradients,
optimizer states), checked against PyTorch's MemTracker.
"""

from __future__ import annotations

from tuneproof.memory.states import OPTIMIZERS, States, state_bytes

__all__ = ["OPTIMIZERS", "States", "state_bytes"]
