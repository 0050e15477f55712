"""Attractors: stock phrases a model falls into ("a testament to", "delve into").

Matching is case-insensitive and on word boundaries; a phrase's spaces match any run of whitespace. The
phrase list is compiled into one regular expression shaped as a trie (phrases sharing a prefix share
its branch), so a list of thousands of phrases costs one pass over the text.

Per response: whether it holds at least one phrase (the yes/no that paired statistics need) and how many
non-overlapping hits it holds; per prompt and run: the share of responses with a hit (percent) and hits
per 1,000 words (EQ-Bench's slop-index convention). Words are `\\w+` runs.

Mining (`mine`): phrases of 1-3 words (inside one clause: never across a stop, comma or line break)
over-represented in model outputs against a human reference,
ranked by the log-odds ratio with an informative Dirichlet prior (Monroe, Colaresi and Quinn 2008,
"Fightin' Words", eq. 16-22): for each n separately, prior alpha_w = A0 * (count in both texts) / (total),
delta_w = log((y_w + a_w) / (n + A0 - y_w - a_w)) - log((r_w + a_w) / (m + A0 - r_w - a_w)),
z_w = delta_w / sqrt(1 / (y_w + a_w) + 1 / (r_w + a_w)). Phrases must appear under at least 2 prompts;
phrases made only of stop words are left out, and so is a piece of a better-ranked phrase with nearly the
same count ("a testament" or "is a testament" when "a testament to" is kept).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tuneproof.core.errors import TuneproofError
from tuneproof.gate.arms import Arm

WORD = re.compile(r"\w+")
PRIOR_STRENGTH = 1000.0  # A0 in Monroe et al.: the prior's total pseudo-count per n-gram order
MIN_PROMPTS = 2
MAX_PHRASE_CHARS = 200
CLAUSE_BREAK = re.compile(r"[.!?;:,()\[\]{}\"“”«»…—–\n]+|\s-+\s")
_WRAPPERS = "'\"‘’“”«»()[]{}*_`"
SAME_HITS = 0.8  # a sub-phrase with at least 80 % of a kept phrase's count is that phrase again
_STOP = """a an and are as at be but by for from had has have he her his i if in into is it its me my no not
of on or our she so than that the their them then there these they this to was we were what when which who
will with you your"""
STOP_WORDS = frozenset(_STOP.split())


class PhraseMatcher:
    """Finds listed phrases in text: one compiled trie-shaped pattern, case-insensitive, word-bounded."""

    def __init__(self, phrases: Iterable[str]) -> None:
        self.phrases = sorted({" ".join(p.lower().split()) for p in phrases if p.strip()})
        if not self.phrases:
            raise TuneproofError("the attractor list is empty", "give one phrase per line")
        longest = max(self.phrases, key=len)
        if len(longest) > MAX_PHRASE_CHARS:
            raise TuneproofError(
                f"the attractor phrase {longest[:40]!r}... has {len(longest)} characters",
                f"keep phrases to {MAX_PHRASE_CHARS} characters (stock phrases are a few words)",
            )
        trie: dict[str, dict] = {}
        for phrase in self.phrases:
            node = trie
            for ch in phrase:
                node = node.setdefault(ch, {})
            node[""] = {}
        self.pattern = re.compile(r"(?<!\w)(?:" + _trie_regex(trie) + r")(?!\w)", re.IGNORECASE)

    def count(self, text: str) -> int:
        return sum(1 for _ in self.pattern.finditer(text))

    def found(self, text: str) -> list[str]:
        return [" ".join(m.group(0).lower().split()) for m in self.pattern.finditer(text)]


def _trie_regex(node: dict[str, dict]) -> str:
    """A regex for the trie below `node`, longest alternatives first (so "of course not" wins over
    "of course" where both match)."""
    ends = "" in node
    branches = []
    for ch in sorted((c for c in node if c), reverse=True):
        head = r"\s+" if ch == " " else re.escape(ch)
        branches.append(head + _trie_regex(node[ch]))
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    # a phrase may end here: the rest is optional, but only where a word ends
    return f"(?:{body})?" if ends else body


def read_phrases(path: str | Path) -> tuple[list[str], str]:
    """Phrases (one per line, '#' comments and blank lines skipped) and the file's sha256."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise TuneproofError(
            f"cannot read the attractor list {p}: {e.strerror}", "pass a text file"
        ) from None
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark would hide the first phrase
    except UnicodeDecodeError as e:
        raise TuneproofError(f"{p}: invalid UTF-8 at byte {e.start}", "save the list as UTF-8") from None
    phrases = [
        line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    if not phrases:
        raise TuneproofError(f"the attractor list {p} is empty", "give one phrase per line")
    return phrases, hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class AttractorScores:
    share: tuple[np.ndarray, np.ndarray]  # percent of responses with a hit, runs x prompts, per arm
    per_1k_words: tuple[np.ndarray, np.ndarray]
    top: list[tuple[str, int, int]]  # (phrase, base hits, tuned hits), most changed first


def attractor_scores(base: Arm, tuned: Arm, prompt_ids: list[str], matcher: PhraseMatcher) -> AttractorScores:
    share: list[np.ndarray] = []
    dens: list[np.ndarray] = []
    totals: list[Counter[str]] = []
    for arm in (base, tuned):
        s = np.full((len(arm.run_names), len(prompt_ids)), np.nan)
        d = np.full_like(s, np.nan)
        found_all: Counter[str] = Counter()
        for i, run in enumerate(arm.run_names):
            for j, p in enumerate(prompt_ids):
                texts = arm.texts(run, p)
                found = [matcher.found(t) for t in texts]
                words = sum(len(WORD.findall(t)) for t in texts)
                s[i, j] = 100.0 * sum(1 for f in found if f) / len(texts)
                d[i, j] = 1000.0 * sum(len(f) for f in found) / words if words else np.nan
                for f in found:
                    found_all.update(f)
        share.append(s)
        dens.append(d)
        totals.append(found_all)
    phrases = set(totals[0]) | set(totals[1])
    top = sorted(
        ((ph, totals[0][ph], totals[1][ph]) for ph in phrases), key=lambda x: (-abs(x[2] - x[1]), x[0])
    )
    return AttractorScores((share[0], share[1]), (dens[0], dens[1]), top[:10])


@dataclass(kw_only=True, frozen=True, slots=True)
class MinedPhrase:
    phrase: str
    z: float
    count: int
    reference_count: int
    num_prompts: int

    def to_dict(self) -> dict[str, object]:
        return {
            "phrase": self.phrase,
            "z": self.z,
            "count": self.count,
            "reference_count": self.reference_count,
            "num_prompts": self.num_prompts,
        }


def _clauses(text: str) -> list[list[str]]:
    """The words of each clause, lower-cased, as the matcher will see them: a clause ends at a stop, comma,
    colon, bracket, dash, line break or any token without a letter or digit, since the matcher could
    never find a phrase across one ("the light. The"). Words are whitespace tokens with quotes and
    brackets stripped from their ends; inner marks stay ("can't", "rock-solid", "$5")."""
    out: list[list[str]] = []
    for part in CLAUSE_BREAK.split(text):
        words: list[str] = []
        for token in part.split():
            word = token.strip(_WRAPPERS).lower()
            if WORD.search(word):
                words.append(word)
            elif words:  # "&", "-", "...": a break inside the clause
                out.append(words)
                words = []
        out.append(words)
    return out


def _ngrams(words: Sequence[str], n: int) -> Iterable[str]:
    return (" ".join(words[i : i + n]) for i in range(len(words) - n + 1))


def _keep(phrase: str) -> bool:
    return not all(w in STOP_WORDS for w in phrase.split())


def mine(arm: Arm, reference: str, top: int = 50, max_words: int = 3) -> list[MinedPhrase]:
    """The `top` phrases most over-represented in the arm's responses against `reference`."""
    ref_clauses = _clauses(reference)
    if not any(ref_clauses):
        raise TuneproofError("the reference text holds no words", "pass a human-written text file")
    out: list[MinedPhrase] = []
    responses = [(r.prompt_id, _clauses(r.text)) for r in arm.responses()]
    for n in range(1, max_words + 1):
        counts: Counter[str] = Counter()
        prompts: dict[str, set[str]] = {}
        for prompt_id, clauses in responses:
            for words in clauses:
                for g in _ngrams(words, n):
                    counts[g] += 1
                    prompts.setdefault(g, set()).add(prompt_id)
        ref = Counter(g for words in ref_clauses for g in _ngrams(words, n))
        y_total, r_total = sum(counts.values()), sum(ref.values())
        if not y_total or not r_total:
            continue
        both_total = y_total + r_total
        for g, y in counts.items():
            if len(prompts[g]) < MIN_PROMPTS or not _keep(g):
                continue
            rc = ref.get(g, 0)
            a = PRIOR_STRENGTH * (y + rc) / both_total
            delta = math.log((y + a) / (y_total + PRIOR_STRENGTH - y - a)) - math.log(
                (rc + a) / (r_total + PRIOR_STRENGTH - rc - a)
            )
            z = delta / math.sqrt(1.0 / (y + a) + 1.0 / (rc + a))
            out.append(MinedPhrase(phrase=g, z=z, count=y, reference_count=rc, num_prompts=len(prompts[g])))
    out.sort(key=lambda m: (-round(m.z, 6), -len(m.phrase.split()), m.phrase))
    kept: list[MinedPhrase] = []
    for m in out:
        if m.z <= 0:
            break
        same = [i for i, k in enumerate(kept) if _same_hits(m, k)]
        if not same:
            if len(kept) < top:
                kept.append(m)
        elif all(len(m.phrase.split()) > len(kept[i].phrase.split()) for i in same):
            # the longer phrase says it all ("cannot help with" for "cannot" and "help"), in the place
            # of the best-ranked piece
            kept[same[0]] = m
            for i in reversed(same[1:]):
                del kept[i]
    return sorted(kept, key=lambda m: (-round(m.z, 6), -len(m.phrase.split()), m.phrase))


def _same_hits(a: MinedPhrase, b: MinedPhrase) -> bool:
    """Two phrases that are pieces of one longer phrase, with nearly the same count: one phrase inside
    the other ("a testament" in "a testament to"), or overlapping by all but one word ("is a
    testament" and "a testament to" from "is a testament to")."""
    x, y = a.phrase.split(), b.phrase.split()
    inside = f" {a.phrase} " in f" {b.phrase} " or f" {b.phrase} " in f" {a.phrase} "
    n = min(len(x), len(y)) - 1
    overlap = n >= 1 and len(x) == len(y) and (x[-n:] == y[:n] or y[-n:] == x[:n])
    return (inside or overlap) and min(a.count, b.count) >= SAME_HITS * max(a.count, b.count)
