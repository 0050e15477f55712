"""The one table style of tuneproof's terminal output.

rich shrinks a table that is wider than the terminal by wrapping its cells at spaces, and cuts a
word that still does not fit with an ellipsis: at 80 columns `5.636e+14` became `5.636e…` and the
header `zero-pad` became `zero-p…`, a number that lost its exponent. Tables here are drawn without
vertical rules (a column costs its width plus one space), and a cell that does not fit folds onto
the next line instead of being cut, so no digit is ever dropped.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table as RichTable


class Table(RichTable):
    """rich's `Table` with tuneproof's defaults: `box.SIMPLE_HEAD`, no edge padding, titles on the
    left, and every column wrapping at spaces, then folding (never cropping) what still does not
    fit. Headers are best a word or two that wrap: the narrowest a column gets is its longest word."""

    def __init__(self, *headers: Any, **kwargs: Any) -> None:
        kwargs.setdefault("box", box.SIMPLE_HEAD)
        kwargs.setdefault("pad_edge", False)
        kwargs.setdefault("title_justify", "left")
        kwargs.setdefault("collapse_padding", True)
        super().__init__(*headers, **kwargs)

    def add_column(self, header: Any = "", *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("overflow", "fold")

        super().add_column(header, *args, **kwargs)
