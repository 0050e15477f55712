"""Base identity: a per-tensor digest of a model folder, and what a difference between two bases is.

The digest of a tensor is sha256 over its raw safetensors bytes, next to its dtype and shape; the
model's digest is sha256 over the sorted lines `name dtype shape digest`. Files are read shard by
shard in chunks, never loaded as a model. A digest per tensor (not of a few tensors, nor of the file)
is needed because a directional ablation changes only embed_tokens, o_proj and down_proj
(references/gate-and-serving.md section 7), and because two saves of the same weights can differ in
byte order of the header.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.ship.tensors import (
    COPY_CHUNK,
    FLOAT_DTYPES,
    Checkpoint,
    iter_chunks,
    open_checkpoint,
    read_tensor,
)

FORMAT = "tuneproof-fingerprint/1"
ALGORITHM = "sha256"
FINGERPRINT_NAME = "base_fingerprint.json"


@dataclass(kw_only=True, frozen=True, slots=True)
class Fingerprint:
    digest: str
    tensors: dict[str, tuple[str, tuple[int, ...], str]]  # name -> (dtype, shape, sha256)
    total_bytes: int
    source: str  # the folder it was taken from, as given

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "algorithm": ALGORITHM,
            "digest": self.digest,
            "source": self.source,
            "total_bytes": self.total_bytes,
            "num_tensors": len(self.tensors),
            "tensors": {
                name: {"dtype": d, "shape": list(s), ALGORITHM: h}
                for name, (d, s, h) in sorted(self.tensors.items())
            },
        }


def overall(tensors: dict[str, tuple[str, tuple[int, ...], str]]) -> str:
    lines = "".join(f"{n} {d} {list(s)} {h}\n" for n, (d, s, h) in sorted(tensors.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def fingerprint(folder: Path | Checkpoint, progress: Callable[[int], None] | None = None) -> Fingerprint:
    """Digest every tensor of a model folder; `progress(n)` is called with each chunk's byte count."""
    checkpoint = folder if isinstance(folder, Checkpoint) else open_checkpoint(Path(folder))
    tensors: dict[str, tuple[str, tuple[int, ...], str]] = {}
    buffer = bytearray(COPY_CHUNK)  # one buffer for every read: nothing allocated per piece
    for shard in checkpoint.shards:
        with shard.path.open("rb", buffering=0) as f:
            for info in sorted(shard.tensors.values(), key=lambda t: t.begin):
                h = hashlib.sha256()
                for piece in iter_chunks(info, f, buffer):
                    h.update(piece)
                    if progress:
                        progress(len(piece))
                tensors[info.name] = (info.dtype, info.shape, h.hexdigest())
    return Fingerprint(
        digest=overall(tensors), tensors=tensors, total_bytes=checkpoint.nbytes, source=str(checkpoint.folder)
    )


def read_fingerprint(path: Path) -> Fingerprint:
    """A fingerprint JSON written by `to_json`, checked: its own digest must match its tensor lines."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TuneproofError(
            f"cannot read fingerprint {path}: {getattr(e, 'strerror', None) or 'not JSON'}",
            "pass a fingerprint file that tuneproof wrote",
        ) from None
    try:
        if data.get("format") != FORMAT or data.get("algorithm") != ALGORITHM:
            raise KeyError("format")
        tensors = {
            str(n): (str(t["dtype"]), tuple(int(d) for d in t["shape"]), str(t[ALGORITHM]))
            for n, t in data["tensors"].items()
        }
        digest, total = str(data["digest"]), int(data["total_bytes"])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise TuneproofError(
            f"{path} is not a tuneproof fingerprint ({FORMAT})", "write it again with tuneproof fingerprint"
        ) from None
    if overall(tensors) != digest:
        raise TuneproofError(
            f"{path} was edited: its digest does not match its tensor list", "write it again from the model"
        )
    return Fingerprint(digest=digest, tensors=tensors, total_bytes=total, source=str(data.get("source", "")))


@dataclass(kw_only=True, frozen=True, slots=True)
class Difference:
    changed: list[str]  # same name, dtype and shape, other bytes
    reshaped: list[str]  # same name, other shape
    only_a: list[str]
    only_b: list[str]
    retyped: list[str] = field(default_factory=list)  # same name and shape, other dtype (fp32 -> bf16)

    @property
    def identical(self) -> bool:
        return not (self.changed or self.reshaped or self.retyped or self.only_a or self.only_b)

    @property
    def num_differing(self) -> int:
        return (
            len(self.changed) + len(self.reshaped) + len(self.retyped) + len(self.only_a) + len(self.only_b)
        )

    @property
    def comparable(self) -> list[str]:
        """Tensors whose values can be compared: same shape (their bytes or their dtype differ)."""
        return sorted(self.changed + self.retyped)


def diff_fingerprints(a: Fingerprint, b: Fingerprint) -> Difference:
    """Which tensors of `b` differ from `a`: changed bytes, another dtype, another shape, or only in one."""
    changed, reshaped, retyped = [], [], []
    for name in sorted(a.tensors.keys() & b.tensors.keys()):
        (da, sa, ha), (db, sb, hb) = a.tensors[name], b.tensors[name]
        if sa != sb:
            reshaped.append(name)
        elif da != db:
            retyped.append(name)
        elif ha != hb:
            changed.append(name)
    return Difference(
        changed=changed,
        reshaped=reshaped,
        only_a=sorted(a.tensors.keys() - b.tensors.keys()),
        only_b=sorted(b.tensors.keys() - a.tensors.keys()),
        retyped=retyped,
    )


# --- what a difference is ---------------------------------------------------------------------------

# Matrices that write into the residual stream, and the side of the matrix that is the residual
# (hidden-size) dimension: the rows of o_proj/down_proj (out x in), the columns of embed_tokens
# (vocab x hidden). A directional ablation (Arditi et al. 2024, andyrdt/refusal_direction
# `get_orthogonalized_matrix`) edits exactly these with W - r r^T W (rows) or W - W r r^T (columns).
RESIDUAL_WRITERS = {"o_proj": 0, "down_proj": 0, "embed_tokens": 1, "out_proj": 0, "dense": 0, "w2": 0}
RANK_TOL = 0.1  # singular values above this fraction of the largest count towards the rank
TOP_SHARE_RANK1 = 0.9  # a change is rank-1 when its first singular value carries this share of ||D||^2
SHARED_COS = 0.9  # |cos| between a matrix's direction and the shared one for "one direction"
SVD_Q = 8  # singular values estimated per difference (torch.svd_lowrank's q)
CAST = "a cast"  # the note of a tensor that differs from A only by its dtype's rounding


@dataclass(kw_only=True, frozen=True, slots=True)
class MatrixChange:
    name: str
    shape: tuple[int, ...]
    rank: int | None  # numerical rank of the difference, among the top SVD_Q; None: not a matrix
    top_share: float  # share of ||D||_F^2 in the first singular value
    relative: float  # ||D||_F / ||W_a||_F
    residual_cos: float | None = None  # |cos| of its residual-side direction with the shared direction
    note: str = ""
    rank_at_least: bool = False  # every estimated singular value counted: the rank is this or more


@dataclass(slots=True)
class Characterisation:
    changes: list[MatrixChange] = field(default_factory=list)
    verdict: str = ""
    ablation: bool = False


def _family(name: str) -> str | None:
    parts = name.split(".")
    for part in reversed(parts):
        if part in RESIDUAL_WRITERS:
            return part
    return None


def characterise(
    a: Checkpoint, b: Checkpoint, names: list[str], limit: int = 512, seed: int = 0
) -> Characterisation:
    """Rank and direction of each differing matrix D = W_b - W_a (fp32, randomised SVD on D only).
    A tensor stored in another dtype (an fp32 base against a bf16 merge) is compared in fp32 too; when
    B is exactly A rounded to B's dtype, it is named a cast, with no change of its own.
    `limit` bounds how many matrices are decomposed (the first ones in name order)."""
    import torch

    result = Characterisation()
    a_shard, b_shard = a.shard_of(), b.shard_of()
    directions: list[tuple[int, Any]] = []
    for name in names[:limit]:
        ia, ib = a.tensors[name], b.tensors[name]
        floats = ia.dtype in FLOAT_DTYPES and ib.dtype in FLOAT_DTYPES and ia.shape == ib.shape
        retyped = f"{ia.dtype} -> {ib.dtype}" if ia.dtype != ib.dtype else ""
        if floats and retyped:
            with a_shard[name].path.open("rb") as fa, b_shard[name].path.open("rb") as fb:
                raw_a, raw_b = read_tensor(ia, fa), read_tensor(ib, fb)
            if torch.equal(raw_a.to(raw_b.dtype), raw_b):
                note = f"{CAST} ({retyped}): B is A rounded to {ib.dtype}"
                result.changes.append(
                    MatrixChange(name=name, shape=ia.shape, rank=0, top_share=0.0, relative=0.0, note=note)
                )
                continue
        if not floats or len(ia.shape) < 2:
            what = "not a float matrix" + (f" ({retyped})" if retyped else "")
            result.changes.append(
                MatrixChange(
                    name=name,
                    shape=ia.shape,
                    rank=None,
                    top_share=math.nan,
                    relative=math.nan,
                    note=f"{what}: bytes differ",
                )
            )
            continue
        with a_shard[name].path.open("rb") as fa, b_shard[name].path.open("rb") as fb:
            wa = read_tensor(ia, fa).float()
            d = read_tensor(ib, fb).float() - wa
        relative = float(d.norm() / wa.norm().clamp_min(1e-30))
        mats = d.reshape(-1, *d.shape[-2:])  # a 3-D expert tensor: one matrix per expert
        side = RESIDUAL_WRITERS.get(_family(name) or "")
        ranks, shares = [], []
        vecs = []
        for m in mats:
            total = float((m * m).sum())
            if total == 0.0:
                continue
            with torch.random.fork_rng(devices=[]):  # svd_lowrank draws from the global RNG
                torch.manual_seed(seed)
                u, s, v = torch.svd_lowrank(m, q=min(SVD_Q, *m.shape))
            ranks.append(int((s > RANK_TOL * s[0]).sum()))
            shares.append(float(s[0] ** 2) / total)
            if side is not None:
                vecs.append((u[:, 0] if side == 0 else v[:, 0]).clone())
        if not ranks:
            result.changes.append(
                MatrixChange(
                    name=name,
                    shape=ia.shape,
                    rank=0,
                    top_share=0.0,
                    relative=relative,
                    note="bytes differ, values equal",
                )
            )
            continue
        q = min(SVD_Q, *d.shape[-2:])
        saturated = max(ranks) >= q and q < min(d.shape[-2:])  # all q estimated values count: rank >= q
        change = MatrixChange(
            name=name, shape=ia.shape, rank=max(ranks), top_share=min(shares), relative=relative,
            rank_at_least=saturated, note=f"{retyped}, compared in fp32" if retyped else "",
        )  # fmt: skip
        result.changes.append(change)
        if vecs and change.top_share >= TOP_SHARE_RANK1:
            directions.extend((len(result.changes) - 1, vec) for vec in vecs)
    _judge(result, directions, len(names) > limit)
    return result


def _judge(result: Characterisation, directions: list[tuple[int, Any]], truncated: bool) -> None:
    """Fill residual_cos and the verdict: abliteration when every change is a rank-1 edit of a
    residual writer (o_proj, down_proj, embed_tokens) and all share one direction."""
    import torch

    casts = [c for c in result.changes if c.note.startswith(CAST)]
    if casts and len(casts) == len(result.changes):
        result.verdict = f"every one of the {len(casts)} differing tensors is a cast: B is A in another dtype"
        return
    changes = result.changes
    if directions and len({v.shape[0] for _, v in directions}) == 1:
        stacked = torch.stack([v / v.norm() for _, v in directions])
        shared = torch.linalg.svd(stacked, full_matrices=False).Vh[0]
        cos: dict[int, float] = {}
        for i, v in directions:
            c = float(abs(v @ shared) / v.norm())
            cos[i] = min(cos.get(i, 1.0), c)
        for i, c in cos.items():
            changes[i] = _with_cos(changes[i], c)
    cast_note = f"; {len(casts)} more are casts only (A rounded to B's dtype)" if casts else ""
    changes = [c for c in changes if not c.note.startswith(CAST)]
    writers = [c for c in changes if _family(c.name) is not None]
    rank1_shared = [
        c
        for c in writers
        if c.rank == 1 and c.top_share >= TOP_SHARE_RANK1 and (c.residual_cos or 0) >= SHARED_COS
    ]
    families = {_family(c.name) for c in rank1_shared}
    if (
        changes
        and len(rank1_shared) == len(changes)
        and len(changes) >= 2
        and families & {"o_proj", "down_proj"}
    ):
        result.ablation = True
        result.verdict = (
            f"looks like directional ablation (abliteration): {len(changes)} residual-stream writers "
            f"({', '.join(sorted(f for f in families if f))}) each changed by a rank-1 edit along "
            "one shared direction"
        )
    elif changes:
        low, n = sum(1 for c in changes if c.rank is not None and c.rank <= 2), len(changes)
        broad = "a broader change (another fine-tune or another model)"
        if n == 1:
            result.verdict = "a change of rank <= 2" if low else broad
        else:
            result.verdict = f"{low} of {n} by a change of rank <= 2, {n - low} by {broad}"
    result.verdict += cast_note
    if truncated:
        result.verdict += f"; only the first {len(result.changes)} differing tensors were decomposed"


def _with_cos(change: MatrixChange, cos: float) -> MatrixChange:
    import dataclasses

    return dataclasses.replace(change, residual_cos=cos)
