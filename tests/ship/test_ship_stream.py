"""The merge's pipeline (`ship.stream`): a ring lent out and given back in order, shards read, changed and
written in file order across a ring small enough to wrap many times, hashes taken from the bytes read,
and a failure in any of the three stages raised once, with every thread stopped."""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path

import pytest
import torch

import ship_fakes as fx
from tuneproof.ship import stream
from tuneproof.ship.identity import fingerprint
from tuneproof.ship.stream import Pipeline, Ring, ShardJob
from tuneproof.ship.tensors import open_checkpoint


def test_the_ring_lends_in_order_wraps_and_waits_for_what_was_lent_first() -> None:
    stop = threading.Event()
    ring = Ring(256, stop)
    a, b = ring.take(128), ring.take(64)
    assert a is not None and b is not None and ring.spans == deque([(0, 128), (128, 192)])
    # 64 bytes are free at the end but 100 are asked: the take waits until the oldest span is given back
    got: list[memoryview | None] = []
    waiter = threading.Thread(target=lambda: got.append(ring.take(100)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not got
    ring.give()  # a: [0, 128) is free again
    waiter.join(2)
    assert got and got[0] is not None and got[0].nbytes == 100
    assert ring.spans[-1] == (0, 100)  # wrapped to the start
    # once stopped, a take that cannot be served returns None instead of waiting for ever
    stop.set()
    assert ring.take(100) is None


def test_every_piece_starts_aligned_whatever_the_sizes_before_it() -> None:
    ring = Ring(1000, threading.Event())
    starts = []
    for n in (3, 5, 64, 1, 7):
        got = ring.take(n)
        assert got is not None
        starts.append(ring.spans[-1][0])
    assert all(s % stream.ALIGN == 0 for s in starts) and len(set(starts)) == 5


def _jobs(base: Path, out: Path, whole: bool = False) -> list[ShardJob]:
    checkpoint = open_checkpoint(base)
    jobs = []
    for shard in checkpoint.shards:
        infos = tuple(sorted(shard.tensors.values(), key=lambda t: t.begin))
        names = frozenset(i.name for i in infos if whole and i.name.endswith("q_proj.weight"))
        entries = [(i.name, i.dtype, i.shape) for i in infos]
        jobs.append(
            ShardJob(
                source=shard.path,
                out=out / shard.path.name,
                tensors=infos,
                entries=entries,
                metadata=shard.metadata,
                whole=names,
            )
        )
    return jobs


@pytest.fixture
def sharded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A base in 40 KB shards and an empty output folder; pieces of 1000 bytes in a ring of three (or
    two of the largest whole tensor): every tensor wraps the ring many times."""
    base = fx.save(fx.model("llama"), tmp_path / "base", max_shard_size="40KB")
    (tmp_path / "out").mkdir()
    monkeypatch.setattr(stream, "COPY_CHUNK", 1000)
    monkeypatch.setattr(stream, "ring_size", lambda jobs: max(3000, *_whole_sizes(jobs)))
    return base, tmp_path / "out"


def _whole_sizes(jobs: list[ShardJob]) -> list[int]:
    return [2 * t.nbytes for j in jobs for t in j.tensors if t.name in j.whole] or [0]


@pytest.mark.parametrize("whole", [False, True])
def test_shards_are_copied_through_a_small_ring_and_hashed_as_fingerprint_hashes(
    whole: bool, sharded: tuple[Path, Path]
) -> None:
    base, out = sharded
    digests: dict[str, str] = {}
    pieces: list[tuple[str, int, int]] = []

    def change(piece: stream.Piece) -> None:
        pieces.append((piece.info.name, piece.start, piece.data.nbytes))

    jobs = _jobs(base, out, whole)
    pipeline = Pipeline(jobs, hashing=True, digest=lambda info, h: digests.setdefault(info.name, h))
    written = pipeline.run(change, None)
    assert len(jobs) >= 4 and sorted(written) == sorted(j.out.name for j in jobs)
    assert fx.tensors(out).keys() == fx.tensors(base).keys()
    for name, t in fx.tensors(out).items():
        assert torch.equal(t, fx.tensors(base)[name])
    assert {n: h for n, (_, _, h) in fingerprint(base).tensors.items()} == digests
    # pieces of at most the chunk, in file order, a whole tensor in one piece
    assert max(n for name, _, n in pieces if not (whole and name.endswith("q_proj.weight"))) <= 1000
    if whole:
        q = [p for p in pieces if p[0].endswith("q_proj.weight")]
        assert q and all(start == 0 for _, start, _ in q)
    assert {"read", "hash", "write", "fsync"} <= set(pipeline.timings.busy) and pipeline.timings.wall > 0


@pytest.mark.parametrize("stage", ["read", "change", "write"])
def test_a_failure_in_any_stage_is_raised_once_and_stops_every_thread(
    stage: str, sharded: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuneproof.ship import tensors

    base, out = sharded
    seen = {"n": 0}

    def fail_at_the_fifth(*_: object) -> None:
        seen["n"] += 1
        if seen["n"] == 5:
            raise OSError(28, f"{stage} failed")

    if stage == "write":
        real = tensors.ShardWriter.put
        monkeypatch.setattr(
            tensors.ShardWriter, "put", lambda self, n, p: (fail_at_the_fifth(), real(self, n, p))
        )
    before = threading.active_count()
    pipeline = Pipeline(
        _jobs(base, out),
        hashing=True,
        digest=fail_at_the_fifth if stage == "read" else lambda *_: None,
    )
    with pytest.raises(OSError, match=f"{stage} failed"):
        pipeline.run(fail_at_the_fifth if stage == "change" else lambda _: None, None)
    assert threading.active_count() == before  # reader and writer joined
    assert seen["n"] == 5


class _SlowList(list):  # type: ignore[type-arg]
    """A list whose append waits first: widens the gap between a failure and its record."""

    def append(self, item: object) -> None:
        import time

        time.sleep(0.2)
        super().append(item)


def test_a_reader_failure_is_recorded_before_its_end_so_no_half_shard_is_closed(
    sharded: tuple[Path, Path],
) -> None:
    """Found in review: the reader's end went on before its failure was recorded, so the writer could
    take the end for success and close a half-written shard, and its AssertionError hid the cause."""

    class Differs(Exception):
        pass

    def digest(info: object, h: str) -> None:
        raise Differs("the base differs")

    base, out = sharded
    pipeline = Pipeline(_jobs(base, out), hashing=True, digest=digest)
    pipeline.errors = _SlowList()
    with pytest.raises(Differs):
        pipeline.run(lambda _: None, None)
    assert [type(e) for _, e in pipeline.errors] == [Differs]


def test_what_the_reader_found_wins_over_what_the_change_then_raised(
    sharded: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    class Differs(Exception):
        pass

    base, out = sharded
    monkeypatch.setattr(stream, "ring_size", lambda jobs: 2**20)  # the reader never waits for the change

    def digest(info: object, h: str) -> None:
        raise Differs("the base differs")

    def change(piece: stream.Piece) -> None:
        deadline = time.monotonic() + 10
        while not pipeline.errors and time.monotonic() < deadline:  # fail after the reader did
            time.sleep(0.01)
        raise ValueError("overflows F16")

    pipeline = Pipeline(_jobs(base, out), hashing=True, digest=digest)
    with pytest.raises(Differs):
        pipeline.run(change, None)
    assert {type(e) for _, e in pipeline.errors} == {Differs, ValueError}


def test_a_ctrl_c_while_the_last_fsync_runs_stops_and_joins_every_thread(
    sharded: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: a Ctrl-C during the final wait left the writer running, the stop unset."""
    import signal
    import time

    from tuneproof.ship import tensors

    base, out = sharded
    real = tensors.ShardWriter.close

    def slow_close(self: tensors.ShardWriter) -> None:
        time.sleep(0.5)
        real(self)

    monkeypatch.setattr(tensors.ShardWriter, "close", slow_close)

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    before = threading.active_count()
    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    pipeline = Pipeline(_jobs(base, out), hashing=False, digest=lambda *_: None)
    try:
        with pytest.raises(KeyboardInterrupt):
            pipeline.run(lambda _: None, None)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert pipeline.stop.is_set() and threading.active_count() == before
