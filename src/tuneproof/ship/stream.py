"""Safetensors shards read, changed and written as one pipeline, so that a merge runs at the disk's speed.

A reader thread reads (and hashes) the next pieces into a ring of fixed memory while the calling thread
changes the current piece in place and a writer thread writes (and fsyncs) the previous ones. File
reads, file writes, sha256 and torch's kernels all release the GIL, so the three overlap. Pieces flow
in file order; a tensor is one piece when it is to be changed as a whole (`ShardJob.whole`), else pieces of
at most COPY_CHUNK. Memory is the ring, whatever the model's size: nothing is allocated per piece.
"""

from __future__ import annotations

import hashlib
import mmap
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.ship.tensors import COPY_CHUNK, ShardWriter, TensorInfo, read_exact

DONE = object()  # the end of a queue
READ, CHANGE, WRITE = "read", "change", "write"  # the stages, for errors


@dataclass(kw_only=True, frozen=True, slots=True)
class ShardJob:
    """One shard: read from `source`, written to `out` with `entries` (name, dtype, shape) in its header."""

    source: Path
    out: Path
    tensors: tuple[TensorInfo, ...]  # in file order
    entries: list[tuple[str, str, tuple[int, ...]]]
    metadata: dict[str, str]
    whole: frozenset[str] = frozenset()  # tensors read as one piece


@dataclass(kw_only=True, slots=True)
class Piece:
    job: int  # index of its shard's ShardJob
    info: TensorInfo
    start: int  # byte offset inside the tensor
    data: memoryview  # the bytes read (in the ring); a change in place is written from here
    last: bool  # the tensor's last piece
    out: bytes | memoryview | None = None  # what to write instead of `data`, when the change made it
    in_ring: bool = True


READER_STAGES = ("read", "hash")
WRITER_STAGES = ("write", "fsync")
AFTER = "finish"  # work after the stream (side files, index, rename): not part of `wall`


@dataclass(slots=True)
class Timings:
    """Seconds each stage was busy (the stages overlap: their sum exceeds `wall`, the stream's own time).
    Stages of the reader thread are READER_STAGES, of the writer WRITER_STAGES; every other stage but
    AFTER is the calling thread's change of the pieces."""

    busy: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0

    def add(self, stage: str, seconds: float) -> None:
        self.busy[stage] = self.busy.get(stage, 0.0) + seconds

    def by_thread(self) -> dict[str, float]:
        """Busy seconds of the reader ('reading'), the calling thread ('changing') and the writer
        ('writing'): the largest is what bounds the stream."""
        known = (*READER_STAGES, *WRITER_STAGES, AFTER)
        return {
            "reading": sum(self.busy.get(k, 0.0) for k in READER_STAGES),
            "changing": sum(v for k, v in self.busy.items() if k not in known),
            "writing": sum(self.busy.get(k, 0.0) for k in WRITER_STAGES),
        }


ALIGN = 64  # every piece starts at a multiple of this in the ring (a tensor's view is never misaligned)


class Ring:
    """A fixed buffer lent out in order and given back in the same order: the reader takes, the writer
    gives back, and a take waits until the oldest pieces are written. Anonymous memory, page-aligned;
    a page is resident once first used, and a ring in use soon uses all of them."""

    def __init__(self, size: int, stop: threading.Event):
        self.size = size
        self.view = memoryview(mmap.mmap(-1, size))
        self.spans: deque[tuple[int, int]] = deque()
        self.head = 0
        self.stop = stop
        self.cond = threading.Condition()

    def take(self, n: int) -> memoryview | None:
        """`n` contiguous bytes, or None once the pipeline stops."""
        assert n <= self.size, f"{n} bytes asked of a ring of {self.size}"
        with self.cond:
            while (start := self._fit(n)) is None:
                if self.stop.is_set():
                    return None
                self.cond.wait(0.1)
            self.spans.append((start, start + n))
            self.head = start + n
            return self.view[start : start + n]

    def _fit(self, n: int) -> int | None:
        if not self.spans:
            return 0
        tail = self.spans[0][0]
        head = -(-self.head // ALIGN) * ALIGN
        if self.head > tail:  # free: [head, size) then [0, tail)
            return head if head + n <= self.size else (0 if n <= tail else None)
        return head if head + n <= tail else None  # wrapped: free is [head, tail)

    def give(self) -> None:
        with self.cond:
            self.spans.popleft()
            if not self.spans:
                self.head = 0
            self.cond.notify_all()


def ring_size(jobs: list[ShardJob], least: int = 64 * 2**20) -> int:
    """Room for two of the largest whole pieces, and at least `least` bytes."""
    whole = [t.nbytes for j in jobs for t in j.tensors if t.name in j.whole]
    return max(least, 2 * max(whole, default=0), 2 * COPY_CHUNK)


class Pipeline:
    """Run `jobs`: `change(piece)` on the calling thread for each piece; `digest(info, sha256)` on the
    reader thread for each tensor when `hashing` (it may raise to stop everything). Returns the bytes
    written per shard. A failure anywhere stops all three stages and is raised here."""

    def __init__(self, jobs: list[ShardJob], *, hashing: bool, digest: Callable[[TensorInfo, str], None]):
        self.jobs, self.hashing, self.digest = jobs, hashing, digest
        self.stop = threading.Event()
        self.ring = Ring(ring_size(jobs), self.stop)
        self.read_q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.write_q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.errors: list[tuple[str, BaseException]] = []  # (stage, error), in the order they happened
        self.timings = Timings()
        self.written: dict[str, int] = {}

    def run(self, change: Callable[[Piece], None], progress: Callable[[int], None] | None) -> dict[str, int]:
        t0 = time.perf_counter()
        threads = [
            threading.Thread(target=self._guard, args=(READ, self._read, self.read_q), daemon=True),
            threading.Thread(target=self._guard, args=(WRITE, self._write, None), daemon=True),
        ]
        for t in threads:
            t.start()
        try:
            while (item := self.read_q.get()) is not DONE and not self.stop.is_set():
                if isinstance(item, Piece):
                    change(item)
                    if progress:
                        progress(item.data.nbytes)
                self.write_q.put(item)
        except BaseException as e:
            self.stop.set()
            self.errors.append((CHANGE, e))
        self.write_q.put(DONE)
        self._join(threads)
        self.timings.wall = time.perf_counter() - t0
        if self.errors:
            raise self._cause()
        return self.written

    def _cause(self) -> BaseException:
        """The error to raise when several stages failed: a Ctrl-C first, then what the reader found (a
        differing base, a cut file: the input is wrong, whatever became of it), then the change, then
        the writer."""
        order = {READ: 1, CHANGE: 2, WRITE: 3}
        _, error = min(self.errors, key=lambda se: (not isinstance(se[1], KeyboardInterrupt), order[se[0]]))
        return error

    def _join(self, threads: list[threading.Thread]) -> None:
        """Wait for both threads. A Ctrl-C while waiting (the writer's last fsync can take seconds) stops
        them, is kept to be raised, and the wait goes on: no thread outlives the call."""
        while any(t.is_alive() for t in threads):
            try:
                for t in threads:
                    t.join()
            except BaseException as e:
                self.stop.set()
                self.errors.append((CHANGE, e))

    def _guard(self, stage: str, work: Callable[[], None], done: queue.SimpleQueue[Any] | None) -> None:
        """Run a thread's work; a failure is kept for the calling thread, which raises it, and the
        pipeline stops before the thread's queue is closed (so no stage takes the end for success)."""
        try:
            work()
        except BaseException as e:
            self.errors.append((stage, e))
            self.stop.set()
        finally:
            if done is not None:
                done.put(DONE)

    def _read(self) -> None:
        for k, job in enumerate(self.jobs):
            self.read_q.put(k)  # a new shard starts
            try:
                f = job.source.open("rb", buffering=0)
            except OSError as e:
                raise TuneproofError(
                    f"cannot read {job.source}: {e.strerror}", "check the base folder"
                ) from None
            with f:
                for info in job.tensors:
                    if not self._read_tensor(k, job, info, f):
                        return

    def _read_tensor(self, k: int, job: ShardJob, info: TensorInfo, f: Any) -> bool:
        step = info.nbytes if info.name in job.whole else COPY_CHUNK
        h = hashlib.sha256() if self.hashing else None
        start = 0
        while True:
            n = min(step, info.nbytes - start)
            data = self.ring.take(n) if n else memoryview(b"")
            if data is None:
                return False
            t = time.perf_counter()
            try:
                read_exact(f, info.begin + start, data, info.name)
            except OSError as e:
                raise TuneproofError(
                    f"reading {info.name} from {job.source} failed: {e.strerror}", "check the base's disk"
                ) from None
            t1 = time.perf_counter()
            self.timings.add("read", t1 - t)
            if h is not None:
                h.update(data)
                self.timings.add("hash", time.perf_counter() - t1)
            start += n
            last = start == info.nbytes
            if last and h is not None:
                self.digest(
                    info, h.hexdigest()
                )  # before the last piece goes on: a differing tensor stops here
            self.read_q.put(Piece(job=k, info=info, start=start - n, data=data, last=last, in_ring=bool(n)))
            if last:
                return True

    def _write(self) -> None:
        writer: ShardWriter | None = None
        try:
            while (item := self.write_q.get()) is not DONE:
                if self.stop.is_set():
                    continue  # drain: nothing more is written
                if isinstance(item, int):
                    self._close(writer)
                    job = self.jobs[item]
                    writer = ShardWriter(job.out, job.entries, job.metadata)
                    continue
                assert writer is not None
                t = time.perf_counter()
                writer.put(item.info.name, item.out if item.out is not None else item.data)
                self.timings.add("write", time.perf_counter() - t)
                if item.in_ring:
                    self.ring.give()
            if not self.stop.is_set():
                self._close(writer)
                writer = None
        finally:
            if writer is not None:
                writer.abort()

    def _close(self, writer: ShardWriter | None) -> None:
        if writer is None:
            return
        t = time.perf_counter()
        writer.close()  # flush and fsync
        self.timings.add("fsync", time.perf_counter() - t)
        self.written[writer.path.name] = writer.total
