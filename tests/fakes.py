"""Fake clocks and workloads whose right answer is known, for the measurement code."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class FakeClock:
    """A clock that only moves when a fake workload says so: time is exact and free."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def workload(self, seconds: Callable[[int], float]) -> Callable[[], None]:
        """A step that takes `seconds(call_number)` (call numbers count from 0, warm-up included)."""
        calls = {"n": 0}

        def step() -> None:
            self.now += seconds(calls["n"])
            calls["n"] += 1

        return step


A, B = 6.87e-4, 8.85e-8  # docs/reference-run.md section 2


def case_time(w: float, c: float = 0.0) -> float:
    return c + A * w + B * w * w


def noisy(w: float, rel: float, seed: int, c: float = 0.0) -> Callable[[int], float]:
    """The CASE's step time at width w with multiplicative noise of `rel` (a shared machine)."""
    rng = np.random.default_rng([seed, int(w)])
    return lambda n: case_time(w, c) * (1.0 + rel * float(rng.standard_normal()))


class _Props:
    """torch.cuda.get_device_properties' answer: the shared-memory limit, or none (an old torch)."""

    def __init__(self, smem: int | None) -> None:
        if smem is not None:
            self.shared_memory_per_block_optin = smem


def fake_cuda_device(
    monkeypatch, name: str, capability: tuple[int, int], smem: int | None, hip: str | None = None
):
    """This machine as one CUDA card of `name` and `capability` (ROCm when `hip` is given)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: capability)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: _Props(smem))
    monkeypatch.setattr(torch.version, "hip", hip)
