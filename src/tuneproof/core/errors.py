"""The one user-facing error type.

Library callers catch `TuneproofError`; the CLI prints `error: <what> (<how to fix>)` to stderr and
exits with `exit_code`, never with a traceback.

Errors about an input name the library's field (`seq_len`), not a command-line flag: a Python caller
never passed `--seq-len`. The message marks each field as `{seq_len}`; `message` writes the field
name, and the CLI writes the flag of the command that ran (`--seq-len`) through `with_labels`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

USAGE_EXIT_CODE = 2
_FIELD = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


class TuneproofError(ValueError):
    """An error the user can fix: bad input, unsupported model, unknown GPU.

    `what` says what is wrong, `hint` says how to fix it; both are one line. `{name}` in either marks
    the field `name` (listed in `fields`); it renders as the bare name unless labels are given.
    """

    def __init__(
        self,
        what: str,
        hint: str | None = None,
        exit_code: int = USAGE_EXIT_CODE,
        fields: tuple[str, ...] = (),
    ) -> None:
        self.what = what
        self.hint = hint
        self.exit_code = exit_code
        self.fields = fields
        self.labels: dict[str, str] = {}
        super().__init__(self.message)

    def _render(self, text: str) -> str:
        if not self.fields:
            return text
        return _FIELD.sub(
            lambda m: self.labels.get(m.group(1), m.group(1)) if m.group(1) in self.fields else m.group(0),
            text,
        )

    @property
    def message(self) -> str:
        what = self._render(self.what)
        return f"{what} ({self._render(self.hint)})" if self.hint else what

    def with_labels(self, labels: Mapping[str, str]) -> TuneproofError:
        """The same error with fields written as `labels[field]` (the CLI passes its flags)."""
        self.labels = {f: labels[f] for f in self.fields if f in labels}
        self.args = (self.message,)
        return self


def field_error(field: str, problem: str, hint: str | None = None) -> TuneproofError:
    """`{field} <problem>`: an input field with a bad value."""
    return TuneproofError(f"{{{field}}} {problem}", hint, fields=(field,))
