"""SIGTERM as an exception, and cleanups that a second signal cannot cut short.

`timeout`, Slurm, `docker stop` and systemd stop a process with SIGTERM, whose default action kills it
without a chance to remove a half-written output. The command line turns SIGTERM into `Terminated`
(a `KeyboardInterrupt`, so every cleanup that runs on Ctrl-C runs on it too); `held_signals` keeps
SIGINT and SIGTERM from interrupting a cleanup under way (a second Ctrl-C during the removal of a
partial folder would leave part of it).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process stopped by it


class Terminated(KeyboardInterrupt):
    """The process was asked to stop (SIGTERM)."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises `Terminated` in the main thread for the block (then the old handler is back).
    Elsewhere than the main thread, or where a handler other than the default is set, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.getsignal(signal.SIGTERM)
    if old is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextmanager
def held_signals() -> Iterator[None]:
    """SIGINT and SIGTERM ignored for the block (a cleanup), then their handlers back; a no-op off the
    main thread, where Python cannot set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, signal.SIG_IGN)
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def ignore_interrupts() -> None:
    """From now on SIGINT and SIGTERM are ignored: for a process that has said its last word and exits
    (a further Ctrl-C would only print a traceback from an exit handler)."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
