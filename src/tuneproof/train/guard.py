"""An observer never stops what it observes: every part of `TuneproofCallback` runs behind a guard.

A part whose code raises (an attention implementation, an optimizer or a batch layout nobody planned
for, a bug of ours) is turned off: one warning names the part and what it raised, its later calls do
nothing, and the user's training run goes on. The other parts keep working. A KeyboardInterrupt or a
SystemExit is the user's, not a part's failure: it passes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

# The callback's parts, as its warnings name them.
READING = "reading the run"  # the model, its adapters and the Trainer's arguments, at train begin
FLOPS = "FLOPs and MFU"  # recording each micro-batch, pricing it, logging TFLOP/s, MFU and padding
TOKENS = "trained tokens"  # the tokens each step trains, and the warning for a micro-batch with none
EOS = "EOS check"  # the first step's every EOS masked
ACCUMULATION = "accumulation check"  # the logged loss against the trained tokens' mean
ADVICE = "first-step advice"  # padding, slow attention paths, documents attending to each other
ISOLATION = "isolation check"  # check_isolation's packed row run document by document
RECOMPILES = "recompile check"  # frames dynamo compiled, near its limit
MEMORY = "memory check"  # the allocator's peak against the memory ledger's prediction
HEALTH = "adapter health"  # at train end
FINGERPRINT = "base fingerprint"  # at train end, with record_base
ORDER = "log order"  # running the callback's on_log before the reporting callbacks
LOGGING = "logging"  # the metrics into the Trainer's logs


class Guards:
    """Which parts are off, and why; `call` runs one behind the guard."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.off: dict[str, str] = {}
        self._say = say

    def call(self, part: str, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R | None:
        """`fn(*args, **kwargs)`, or None when `part` is off or `fn` raised (which turns it off)."""
        if part in self.off:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # an observer never stops what it observes
            self.turn_off(part, f"{type(e).__name__}: {e}")
            return None

    def turn_off(self, part: str, why: str) -> None:
        """Turn `part` off and say so once."""
        if part in self.off:
            return
        self.off[part] = why
        self._say(f"tuneproof: {part} turned off after an unexpected error ({why}); the training run goes on")


def guarded(part: str) -> Callable[[Callable[..., R]], Callable[..., R | None]]:
    """A method of an object with `parts` (a `Guards`), run behind the guard of `part`."""

    def wrap(method: Callable[..., R]) -> Callable[..., R | None]:
        @functools.wraps(method)
        def inner(self: Any, *args: Any, **kwargs: Any) -> R | None:
            return self.parts.call(part, method, self, *args, **kwargs)

        return inner

    return wrap
