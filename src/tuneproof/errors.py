"""The one user-facing error type.

Library callers catch `TuneproofError`; the CLI prints `error: <what> (<how to fix>)` to stderr and
exits with `exit_code`, never with a traceback.
"""

from __future__ import annotations

USAGE_EXIT_CODE = 2


class TuneproofError(ValueError):
    """An error the user can fix: bad input, unsupported model, unknown GPU.

    `what` says what is wrong, `hint` says how to fix it; both are one line.
    """

    def __init__(self, what: str, hint: str | None = None, exit_code: int = USAGE_EXIT_CODE) -> None:
        self.what = what
        self.hint = hint
        self.exit_code = exit_code
        super().__init__(self.message)

    @property
    def message(self) -> str:
        return f"{self.what} ({self.hint})" if self.hint else self.what
