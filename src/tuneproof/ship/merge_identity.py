"""Is the base the one the adapter was trained on? The base's fingerprint against the one recorded next
to the adapter (`base_fingerprint.json`), and what any difference looks like when the recorded base's
folder is still there, unchanged, to compare with."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tuneproof.core.errors import TuneproofError
from tuneproof.ship.identity import (
    FINGERPRINT_NAME,
    Characterisation,
    Difference,
    Fingerprint,
    characterise,
    diff_fingerprints,
    fingerprint,
    overall,
    read_fingerprint,
)
from tuneproof.ship.tensors import Checkpoint, TensorInfo, iter_chunks, open_checkpoint


@dataclass(kw_only=True, slots=True)
class Identity:
    """What is known about the base being the one the adapter was trained on."""

    recorded: bool
    same: bool | None  # None: nothing recorded, cannot tell
    difference: Difference | None = None
    characterisation: Characterisation | None = None
    recorded_source: str = ""

    @property
    def summary(self) -> str:
        """The identity in a few words, the same on the console, in --json and in the merge's record."""
        if self.same:
            return "same as recorded"
        return "DIFFERENT from recorded (allowed)" if self.recorded else "unchecked"


def identity(base: Checkpoint, adapter_dir: Path, progress: Callable[[int], None] | None = None) -> Identity:
    """Compare the base with the fingerprint recorded next to the adapter, and characterise any
    difference when the recorded base's folder is still there."""
    recorded_path = Path(adapter_dir) / FINGERPRINT_NAME
    if not recorded_path.is_file():
        return Identity(recorded=False, same=None)
    return compare(_recorded(recorded_path), fingerprint(base, progress), base)


def compare(recorded: Fingerprint, current: Fingerprint, base: Checkpoint) -> Identity:
    """The base's fingerprint against the recorded one; a difference is characterised when the recorded
    base's folder is still there, unchanged."""
    diff = diff_fingerprints(recorded, current)
    ident = Identity(recorded=True, same=diff.identical, difference=diff, recorded_source=recorded.source)
    if not diff.identical and diff.changed:
        source = Path(recorded.source)
        if source.is_dir() and source.resolve() != base.folder.resolve():
            try:
                trained_on = open_checkpoint(source)
            except TuneproofError:
                return ident
            names = diff.comparable
            if set(names) <= set(trained_on.tensors) and _holds(trained_on, recorded, names):
                ident.characterisation = characterise(trained_on, base, names)
    return ident


def _recorded(path: Path) -> Fingerprint:
    """The fingerprint recorded next to the adapter; a damaged one is refused with what to do here."""
    try:
        return read_fingerprint(path)
    except TuneproofError as e:
        raise TuneproofError(
            e.what, f"remove it, then record it again ('tuneproof fingerprint BASE --out FILE', FILE {path})"
        ) from None


class BaseDiffers(Exception):
    """A tensor of the base read during the merge is not the recorded one (the merge stops there)."""


@dataclass(kw_only=True, slots=True)
class IdentityCheck:
    """The base's identity as a merge needs it: known before any weight is read (`known`: nothing was
    recorded, or the layout already differs, or the caller checked it), or taken from the very bytes the
    merge reads, each tensor's sha256 compared with the recorded one as soon as it is read."""

    adapter_dir: Path
    allow_mismatch: bool
    recorded: Fingerprint | None = None
    known: Identity | None = None
    warnings: list[str] = field(default_factory=list)
    digests: dict[str, tuple[str, tuple[int, ...], str]] = field(default_factory=dict)

    @property
    def hashing(self) -> bool:
        return self.known is None

    def seen(self, info: TensorInfo, digest: str) -> None:
        """Called with each tensor's sha256 as the merge reads it; raises BaseDiffers at the first
        tensor that is not the recorded one unless a mismatch is allowed."""
        self.digests[info.name] = entry = (info.dtype, info.shape, digest)
        assert self.recorded is not None
        if not self.allow_mismatch and self.recorded.tensors.get(info.name) != entry:
            raise BaseDiffers(info.name)

    def result(self, base: Checkpoint) -> tuple[Identity, list[str]]:
        """The identity and its warnings once every tensor was read (refused here if it differs and
        that is not allowed)."""
        if self.known is not None:
            return self.known, self.warnings
        assert self.recorded is not None
        current = Fingerprint(
            digest=overall(self.digests),
            tensors=dict(self.digests),
            total_bytes=base.nbytes,
            source=str(base.folder),
        )
        ident = compare(self.recorded, current, base)
        return ident, judge_identity(ident, self.allow_mismatch, self.adapter_dir)


def identity_check(
    base: Checkpoint, adapter_dir: Path, allow_mismatch: bool, progress: Callable[[int], None] | None = None
) -> IdentityCheck:
    """How a merge checks its base: by the bytes it reads, when a fingerprint is recorded and the base has
    the recorded tensors, dtypes and shapes; otherwise here and now (nothing recorded: a warning; another
    layout: the full comparison, refused unless allowed), before any weight is merged."""
    check = IdentityCheck(adapter_dir=Path(adapter_dir), allow_mismatch=allow_mismatch)
    recorded_path = Path(adapter_dir) / FINGERPRINT_NAME
    if recorded_path.is_file():
        check.recorded = _recorded(recorded_path)
        layout = {n: (t.dtype, t.shape) for n, t in base.tensors.items()}
        if layout == {n: (d, s) for n, (d, s, _) in check.recorded.tensors.items()}:
            return check
        check.known = identity(base, adapter_dir, progress)
    else:
        check.known = Identity(recorded=False, same=None)
    check.warnings = judge_identity(check.known, allow_mismatch, adapter_dir)
    return check


def judge_identity(ident: Identity, allow_base_mismatch: bool, adapter_dir: Path | None = None) -> list[str]:
    """Refuse a base that is not the recorded one (naming the tensors that differ and what the change
    looks like), or return the warnings to show: the loud one when a mismatch is allowed, and, when
    nothing was recorded beside `adapter_dir`, that the identity cannot be checked."""
    if not ident.recorded:
        where = adapter_dir if adapter_dir is not None else "ADAPTER"
        return [
            f"{where} has no base_fingerprint.json: the base's identity cannot be checked "
            f"(record it at train time: 'tuneproof fingerprint BASE --out FILE', "
            f"FILE {where}/base_fingerprint.json)"
        ]
    if ident.same:
        return []
    d = ident.difference
    assert d is not None
    names = (d.changed + d.retyped + d.reshaped + d.only_a + d.only_b)[:3]
    n = d.num_differing
    what = f"{n} tensor{'s differ' if n != 1 else ' differs'} ({', '.join(names)}{', ...' if n > 3 else ''})"
    if ident.characterisation is not None:
        what += f"; {ident.characterisation.verdict}"
    else:
        source = ident.recorded_source or "unknown folder"
        what += f"; the recorded base ({source}) is not here unchanged to characterise the difference"
    if not allow_base_mismatch:
        raise TuneproofError(
            f"the base is not the one the adapter was trained on: {what}",
            "merge onto the recorded base, or pass {allow_base_mismatch} to merge anyway",
            fields=("allow_base_mismatch",),
        )
    return [f"MERGING ONTO A DIFFERENT BASE (mismatch allowed): {what}"]


def _holds(checkpoint: Checkpoint, recorded: Fingerprint, names: list[str]) -> bool:
    """Whether `checkpoint` still holds the recorded bytes of `names` (a folder can change after the
    fingerprint was taken: then it cannot stand for the trained-on base)."""
    shard_of = checkpoint.shard_of()
    for name in names:
        h = hashlib.sha256()
        with shard_of[name].path.open("rb") as f:
            for piece in iter_chunks(checkpoint.tensors[name], f):
                h.update(piece)
        if h.hexdigest() != recorded.tensors[name][2]:
            return False
    return True
