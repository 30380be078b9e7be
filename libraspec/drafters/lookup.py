"""Look-up drafting: continue the longest earlier match of the sequence's last tokens.

The index maps every k-gram (k = MIN_MATCH..MAX_MATCH) of the committed sequence (prompt and
generation) to the positions where it ends, so appending a token costs O(MAX_MATCH) and a
query O(match): no rescan (the prompt-lookup / SuffixDecoding family, arXiv 2411.04975).

A second, read-only index holds a corpus of the pair's own past outputs (`train/lookup_corpus.py`,
a suffix array, `CorpusIndex`); a query follows the sequence's own match whenever it has one
and the corpus's otherwise (measured on the public suites' greedy outputs: letting a longer
corpus match win lowered tau from 1.90 / 3.24 / 1.51 to 1.85 / 3.14 / 1.50 on GSM8K /
HumanEval / MT-Bench, since a sequence repeats its own numbers and names).
A draft follows the occurrences of the longest matching suffix: at each offset j it takes the
token most of the still-agreeing occurrences continue with (ties: the latest), then keeps only
those occurrences. When they run out it matches again over the sequence extended by the draft,
so repetitive text drafts far. q_j is a calibrated estimate of P(x_j accepted | x_1..x_{j-1}
accepted) from the match length, the number of occurrences, their agreement at j and j itself
(`LookupCalibration`, fitted by `python -m libraspec.train.lookup_fit` on data that is never
evaluated on). Drafts are deterministic: their proposal distribution is one-hot, so sampling
accepts x_j with probability p(x_j) and otherwise resamples from p without x_j, as the standard
rule does with q(x_j) = 1 (docs/ARCHITECTURE.md, "Lossless verification").
"""

from __future__ import annotations

import json
import math
import zipfile
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cost import LOOK_UP, Drafting
from ..paths import ASSETS
from ..verify import SamplingConfig
from .base import DraftBuffer, one_hot

MIN_MATCH, MAX_MATCH = 2, 8  # suffix lengths the index keeps
CORPUS_MAX_MATCH = 16  # longest corpus match: the corpus is large, so longer suffixes than MAX_MATCH still occur
MAX_OCCURRENCES = 16  # occurrences a query follows (the sequence's latest; the corpus's spread over all)
DEFAULT_CALIBRATION = ASSETS / "lookup_calibration.json"
DEFAULT_CORPUS = ASSETS / "lookup_corpus.npz"
FEATURES = ("bias", "log_match", "log_count", "agreement", "log_offset", "run_agreement", "corpus")
SEPARATOR = -1  # between corpus sequences: no real tail contains it, so no match spans two
PAST_END = -2  # what the corpus index reads past its end: lower than every token and SEPARATOR


class LookupCalibrationError(ValueError):
    """A look-up asset (the calibration or the corpus file) is missing or damaged."""


@dataclass(frozen=True)
class LookupCalibration:
    """q = sigmoid(w . features): a logistic model of acceptance, fitted on held-apart data."""

    weights: tuple[float, ...]
    meta: dict

    def __post_init__(self):
        if len(self.weights) != len(FEATURES) or not all(math.isfinite(w) for w in self.weights):
            raise ValueError(f"a look-up calibration needs {len(FEATURES)} finite weights ({', '.join(FEATURES)})")

    def confidence(self, features: tuple) -> float:
        """q from (match length, occurrences, agreement, offset j, lowest agreement of the run,
        whether the match is in the corpus)."""
        z = sum(w * v for w, v in zip(self.weights, feature_vector(features)))
        return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))

    @classmethod
    def neutral(cls) -> "LookupCalibration":
        """Every weight 0: q = 0.5 for every draft (for fitting, timing and tests, never for serving)."""
        return cls((0.0,) * len(FEATURES), {"fitted_on": "nothing: neutral"})

    @classmethod
    def load(cls, path: str | Path | None = None) -> "LookupCalibration":
        """Read a fitted calibration (default: the shipped one); a missing or damaged file raises
        LookupCalibrationError saying how to repair it."""
        path = DEFAULT_CALIBRATION if path is None else path
        repair = (
            f"restore it with `git checkout -- {Path(path).name}` in assets/, or refit it with "
            "`python -m libraspec.train.lookup_fit`"
        )
        try:
            data = json.loads(Path(path).read_text())
            return cls(tuple(float(w) for w in data["weights"]), dict(data.get("meta", {})))
        except FileNotFoundError:
            raise LookupCalibrationError(f"the look-up calibration {path} is missing; {repair}") from None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise LookupCalibrationError(f"the look-up calibration {path} is damaged ({err}); {repair}") from None

    def save(self, path: str | Path) -> None:
        from ..files import atomic_write_text

        atomic_write_text(
            str(path), json.dumps({"features": FEATURES, "weights": list(self.weights), "meta": self.meta}, indent=1)
        )


def feature_vector(features: tuple) -> tuple[float, ...]:
    match, count, agreement, offset, run_agreement, corpus = features
    return 1.0, math.log(match), math.log(count), agreement, math.log(offset), run_agreement, float(corpus)


def load_corpus(path: str | Path | None = None, vocab_size: int | None = None) -> "CorpusIndex":
    """The corpus index over a corpus file (`save_corpus`); errors say how to repair it."""
    path = DEFAULT_CORPUS if path is None else path
    repair = (
        "restore it with `git checkout -- assets/lookup_corpus.npz`, or rebuild it with "
        "`python -m libraspec.train.lookup_corpus`"
    )
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            ids = np.asarray(data["ids"])
        if ids.ndim != 1 or ids.dtype.kind != "i":
            raise ValueError(f"ids must be a 1-D integer array, got {ids.dtype} of shape {ids.shape}")
        tokens = ids[ids != SEPARATOR]
        if tokens.size and (tokens.min() < 0 or (vocab_size is not None and tokens.max() >= vocab_size)):
            raise ValueError(f"token ids outside the vocabulary (size {vocab_size})")
        return CorpusIndex(ids)
    except FileNotFoundError:
        raise LookupCalibrationError(f"the look-up corpus {path} is missing; {repair}") from None
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as err:
        raise LookupCalibrationError(f"the look-up corpus {path} is damaged ({err}); {repair}") from None


def save_corpus(path: str | Path, sequences, meta: dict) -> None:
    """Write sequences of token ids as one corpus file: `ids` (int32, SEPARATOR between sequences)
    and `meta` (JSON text), atomically."""
    from ..files import atomic_write

    flat = np.asarray([t for seq in sequences for t in [*map(int, seq), SEPARATOR]], dtype=np.int32)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as handle:
            np.savez_compressed(handle, ids=flat, meta=np.asarray(json.dumps(meta)))

    atomic_write(str(path), write)


class CorpusIndex:
    """A read-only suffix array over the corpus read backwards, for the longest match of a tail.

    Row i of `order` is a start in the reversed corpus; rows are sorted by the reversed text's first
    CORPUS_MAX_MATCH tokens, so the occurrences of tail[-k:] read backwards are one run of rows, and
    the run for k + 1 lies inside the run for k: a query narrows it one token at a time, O(k log N).
    Built by prefix doubling (log2 CORPUS_MAX_MATCH sorts of N keys); `ids` is the corpus forwards,
    SEPARATOR between sequences, so no match spans two of them.
    """

    def __init__(self, ids: np.ndarray):
        ids = np.asarray(ids, dtype=np.int64)  # (N,)
        self.ids = array("i", ids.tolist())
        backwards = ids[::-1]
        self._backwards = array("i", backwards.tolist() + [PAST_END] * CORPUS_MAX_MATCH)
        self._order = array("i", _sorted_starts(backwards, CORPUS_MAX_MATCH).tolist())

    def __len__(self) -> int:
        return len(self.ids)

    def matches(self, tail: list[int]) -> tuple[int, list[int]]:
        """(k, ends) for the longest suffix of `tail` (MIN_MATCH <= k <= CORPUS_MAX_MATCH) in the corpus;
        ends are the positions right after up to MAX_OCCURRENCES of its occurrences, evenly spread."""
        lo, hi, k = 0, len(self._order), 0
        back, order = self._backwards, self._order
        for token in reversed(tail[-CORPUS_MAX_MATCH:]):
            new_lo = bisect_left(order, token, lo, hi, key=lambda s: back[s + k])
            new_hi = bisect_right(order, token, new_lo, hi, key=lambda s: back[s + k])
            if new_lo == new_hi:
                break
            lo, hi, k = new_lo, new_hi, k + 1
        if k < MIN_MATCH:
            return 0, []
        rows = (
            range(lo, hi)
            if hi - lo <= MAX_OCCURRENCES
            else [lo + (hi - lo) * j // MAX_OCCURRENCES for j in range(MAX_OCCURRENCES)]
        )
        return k, sorted(len(self.ids) - order[r] for r in rows)


def _sorted_starts(x: np.ndarray, depth: int) -> np.ndarray:
    """Starts of x's suffixes sorted by their first `depth` symbols (past the end counts lowest;
    ties keep start order): prefix doubling, each pass sorting by (rank of the first h, of the next h)."""
    rank = x - x.min() + 1 if x.size else x  # (N,) >= 1; 0 is past the end
    order = np.arange(x.size)
    h = 1
    while x.size:
        following = np.zeros_like(rank)
        following[:-h] = rank[h:]
        order = np.lexsort((following, rank))
        first, second = rank[order], following[order]
        new = np.r_[True, (first[1:] != first[:-1]) | (second[1:] != second[:-1])]
        rank = np.empty_like(rank)
        rank[order] = np.cumsum(new)
        h *= 2
        if h >= depth or new.all():
            break
    return order


class SuffixIndex:
    """k-gram -> end positions over a growing token sequence; O(MAX_MATCH) per appended token."""

    def __init__(self):
        self.ids: list[int] = []
        self._ends: dict[tuple, list[int]] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def append(self, tokens) -> None:
        for token in tokens:
            self.ids.append(int(token))
            end = len(self.ids)
            for k in range(MIN_MATCH, min(MAX_MATCH, end) + 1):
                self._ends.setdefault(tuple(self.ids[end - k : end]), []).append(end)

    def truncate(self, length: int) -> None:
        """Forget tokens from `length` on (the index is rebuilt; rollbacks of committed text are rare)."""
        if length < len(self.ids):
            kept = self.ids[:length]
            self.ids, self._ends = [], {}
            self.append(kept)

    def matches(self, tail: list[int]) -> tuple[int, list[int]]:
        """(k, ends) for the longest suffix of `tail` (k >= MIN_MATCH) that occurs in the index;
        ends are the positions right after its latest MAX_OCCURRENCES occurrences."""
        for k in range(min(MAX_MATCH, len(tail)), MIN_MATCH - 1, -1):
            ends = self._ends.get(tuple(tail[-k:]))
            if ends:
                return k, ends[-MAX_OCCURRENCES:]
        return 0, []


class LookupDraft(DraftBuffer):
    """One round of look-up drafting over the committed sequence and the drafts so far."""

    def __init__(
        self,
        index: SuffixIndex,
        anchor: int,
        n: int,
        vocab_size: int,
        sampling: SamplingConfig,
        calibration: LookupCalibration,
        corpus: "CorpusIndex | None" = None,
    ):
        super().__init__(n, vocab_size, sampling)
        self.index = index
        self.corpus = corpus
        self.committed = len(index.ids) + 1  # the context holds all but the anchor
        self.anchor = int(anchor)
        self.calibration = calibration
        self._run: tuple[int, list[int], bool] | None = None  # (match length, cursors, in the corpus)
        self._run_agreement = 1.0
        self.features: list[tuple] = []  # per drafted token, what its q was computed from

    def _token(self, position: int) -> int:
        """Token at `position` of the sequence extended by the anchor and the drafts so far."""
        ids = self.index.ids
        if position < len(ids):
            return ids[position]
        if position == len(ids):
            return self.anchor
        return self.tokens[position - len(ids) - 1] if position - len(ids) - 1 < len(self.tokens) else -1

    def _follow(self, cursor: int, in_corpus: bool, length: int) -> int | None:
        """The token an occurrence continues with, or None when it has run out."""
        if in_corpus:
            token = self.corpus.ids[cursor] if cursor < len(self.corpus.ids) else SEPARATOR
            return None if token == SEPARATOR else token
        return self._token(cursor) if cursor < length else None

    def _next(self) -> tuple[int, tuple] | None:
        """The next draft token and the features of its q, or None when nothing matches."""
        length = self.committed + len(self.tokens)  # sequence so far, drafts included
        if self._run is None or not self._run[1]:
            tail = [self._token(p) for p in range(max(0, length - CORPUS_MAX_MATCH), length)]
            k, ends = self.index.matches(tail)
            k_corpus, ends_corpus = self.corpus.matches(tail) if self.corpus is not None and not k else (0, [])
            if not k and not k_corpus:
                return None
            self._run = (k, ends, False) if k else (k_corpus, ends_corpus, True)
            self._run_agreement = 1.0
        k, cursors, in_corpus = self._run
        follows = [self._follow(c, in_corpus, length) for c in cursors]
        votes = Counter(t for t in follows if t is not None)
        if not votes:
            self._run = None
            return None
        best = max(votes.values())
        token = next(t for t in reversed(follows) if t is not None and votes[t] == best)
        agreement = best / len(cursors)
        self._run_agreement = min(self._run_agreement, agreement)
        features = (k, len(cursors), agreement, len(self.tokens) + 1, self._run_agreement, in_corpus)
        self._run = (k, [c + 1 for c, t in zip(cursors, follows) if t == token], in_corpus)
        return token, features

    def _step(self):
        tokens, q = [], []
        while len(tokens) < self.n:
            proposal = self._next()
            if proposal is None and self._run is not None:  # the followed run ended: match again
                self._run = None
                proposal = self._next()
            if proposal is None:
                break
            tokens.append(proposal[0])
            q.append(self.calibration.confidence(proposal[1]))
            self.features.append(proposal[1])
            self.tokens.append(proposal[0])  # later tokens of this step condition on it
        del self.tokens[len(self.tokens) - len(tokens) :]  # `extend` appends the step's tokens
        if not tokens and not self.blocks:
            self.empty = True
        pad = self.n - len(tokens)  # nothing more to look up: placeholders no policy should verify
        tokens += [self.anchor] * pad
        q += [0.0] * pad
        probs = None if self.sampling.greedy else one_hot(tokens, self.vocab_size)
        return tokens, q, probs, "lookup"


class LookupDrafter:
    """Drafts from suffix matches over the prompt and the generation so far; no model, no features."""

    name = "lookup"
    needs_features = False

    @classmethod
    def drafting(cls, kept=(), n=None) -> Drafting:
        return LOOK_UP  # a look-up a step, no upkeep

    def __init__(
        self, n: int, vocab_size: int, calibration: LookupCalibration | None = None, corpus: CorpusIndex | None = None
    ):
        self.n = int(n)
        self.vocab_size = int(vocab_size)
        self.calibration = calibration or LookupCalibration.load()
        self.corpus = corpus

    def new_context(self) -> SuffixIndex:
        return SuffixIndex()

    def context_length(self, context: SuffixIndex) -> int:
        return len(context)

    def fit_context(self, context: SuffixIndex, ids, hidden_states, first_position) -> None:
        keep = len(ids) - 1
        context.truncate(keep)
        context.append(ids[len(context) : keep])

    def start_round(self, context: SuffixIndex, ids, sampling) -> LookupDraft:
        return LookupDraft(context, ids[-1], self.n, self.vocab_size, sampling, self.calibration, self.corpus)
