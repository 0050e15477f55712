"""The callback's warnings, one line each wherever the Trainer calls it from.

`warnings.warn(..., stacklevel=n)` blames a caller's file and prints its source line: for a callback
that is transformers' own dispatch (`trainer_callback.py:...  result = getattr(callback, event)(`),
which says nothing to the reader. `say` files the warning under "tuneproof" with no source line, so
a library user sees `tuneproof:0: UserWarning: tuneproof: ...`, and `pytest.warns` and warning filters
work as for any UserWarning.
"""

from __future__ import annotations

import contextlib
import sys
import warnings


def say(text: str) -> None:
    """Warn `text` (which starts with "tuneproof: ") as a UserWarning filed under tuneproof. Where the
    warning filters turn warnings into errors (`-W error`), the line goes to stderr instead: a warning
    of the callback's never raises into the training run."""
    try:
        warnings.warn_explicit(text, UserWarning, filename="tuneproof", lineno=0, module="tuneproof")
    except Exception:
        with contextlib.suppress(Exception):
            print(text, file=sys.stderr)
