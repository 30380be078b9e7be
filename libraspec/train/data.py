"""Self-distilled shards -> drafter training blocks (assets/TRAINING.md has the recipe).

A shard (written by `selfdistill.py`) holds sequences `ids` = prompt + the target's own
greedy response and `features` (T - 1, L*H_t): the tapped target hidden states of every
token but the last. A training block mirrors one drafter pass of the engine
(`drafters/block.py`): anchor at position p (the last committed token, p >= prompt_len - 1),
context = features of positions < p, block `[ids[p], ids[p+1..p+m] (clean), MASK x n]`
at positions p.., labels on the n mask slots = ids[p+m+1 .. p+m+n], the target's greedy
tokens. m = 0 is the first pass of a round; m = n is the second pass, which conditions
on the block drafted before it (d > n). Labels outside the draft vocabulary (V_d) or past
the end of the sequence are IGNORE. Shards made by `features.py` also hold the target's top-k
next-token distribution after every position; a block's soft labels on slot position t are
the top-k after position t - 1, mapped into V_d (entries outside it are IGNORE, weight 0).

Shapes: B sequences, K blocks per sequence, Q = 1 + m + n block length, T context length.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

IGNORE = -100
HELD_APART_EVERY = 8  # Magpie prompt index % 8 == 0: held apart from the look-up corpus and from training


def held_apart(source: str, prompt_index: int) -> bool:
    """Whether a self-generated answer is kept apart: the look-up confidence model is fitted and
    checked on it (`train.lookup_fit`), and drafter training (`ShardPool`) never reads it."""
    return source == "magpie_ids" and prompt_index % HELD_APART_EVERY == 0


@dataclass
class Sequence:
    ids: torch.Tensor  # (T,) int64: prompt + response
    prompt_len: int
    features: torch.Tensor  # (T - 1, L*H_t) float16
    topk_ids: torch.Tensor | None = None  # (T - 1, k) int: the target's k likeliest next tokens
    topk_probs: torch.Tensor | None = None  # (T - 1, k) float16: their probabilities
    source: str = ""  # the ids folder the sequence came from ("magpie_ids", ...), "" when not recorded
    prompt_index: int = -1  # its prompt's index in that source

    @property
    def anchors(self) -> range:
        """Anchor positions of the engine's rounds: the last prompt token .. the second-to-last token."""
        return range(self.prompt_len - 1, len(self.ids) - 1)


@dataclass
class Batch:
    features: torch.Tensor  # (B, T, L*H_t) float32
    block_ids: torch.Tensor  # (B, K, Q)
    block_positions: torch.Tensor  # (B, K, Q)
    context_limit: torch.Tensor  # (B, K)
    mask: torch.Tensor  # (B, K, Q) bool: mask slots
    labels: torch.Tensor  # (B, K, Q) draft-vocabulary indices, IGNORE elsewhere
    slot: torch.Tensor  # (B, K, Q) 1..n on mask slots, 0 elsewhere (for position weights)
    soft_ids: torch.Tensor  # (B, K, Q, k) draft-vocabulary indices of the target's top-k, IGNORE elsewhere
    soft_probs: torch.Tensor  # (B, K, Q, k) their probabilities (0 where IGNORE); k = 0 without top-k

    def to(self, device) -> "Batch":
        return Batch(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))


def shard_paths(folder) -> list[Path]:
    return sorted(Path(folder).glob("shard_*.pt"))


def load_shard(path, taps: tuple[int, ...] | None = None) -> list[Sequence]:
    """A shard's sequences; `taps` keeps those tapped layers' feature columns (in that order)."""
    data = torch.load(path, map_location="cpu", weights_only=False)
    if "features" not in data:
        raise ValueError(f"{path} is an ids-only shard: add features with `python -m libraspec.train.features`")
    stored = list(data.get("taps", []))
    columns = None
    if taps is not None and list(taps) != stored:
        missing = [t for t in taps if t not in stored]
        if missing:
            raise ValueError(f"{path} has taps {stored}, not {missing}")
        width = data["features"][0].shape[1] // len(stored)
        columns = torch.cat([torch.arange(width) + stored.index(t) * width for t in taps])
    topk = zip(data["topk_ids"], data["topk_probs"]) if "topk_ids" in data else ((None, None) for _ in data["ids"])
    source = Path(data["source"]).parent.name if data.get("source") else ""
    indices = data.get("prompt_index", [-1] * len(data["ids"]))
    out = []
    for ids, plen, feats, (top_ids, top_p), index in zip(
        data["ids"], data["prompt_len"], data["features"], topk, indices
    ):
        ids = torch.as_tensor(ids).long()
        if feats.shape[0] != len(ids) - 1:
            raise ValueError(f"{path}: features cover {feats.shape[0]} tokens, expected {len(ids) - 1}")
        if len(ids) - int(plen) >= 2:  # at least one label
            feats = feats.half() if columns is None else feats[:, columns].half()
            out.append(Sequence(ids, int(plen), feats, top_ids, top_p, source, int(index)))
    return out


class ShardPool:
    """Sequences of every shard in `folder`; `refresh()` loads the shards that appeared since the last call.

    Answers for which `held_apart()` is true go to `self.held_apart` instead of `sequences`: never
    trained on, kept for calibration and monitoring."""

    def __init__(self, folder, taps: tuple[int, ...] | None = None):
        self.folder = Path(folder)
        self.taps = taps
        self.loaded: set[str] = set()
        self.sequences: list[Sequence] = []
        self.held_apart: list[Sequence] = []

    def refresh(self) -> int:
        """Load shards that appeared since the last call; returns how many training sequences were added."""
        added = 0
        for path in shard_paths(self.folder):
            if path.name not in self.loaded and os.path.getsize(path) > 0:
                for s in load_shard(path, self.taps):
                    apart = held_apart(s.source, s.prompt_index)
                    (self.held_apart if apart else self.sequences).append(s)
                    added += not apart
                self.loaded.add(path.name)
        return added

    @property
    def response_tokens(self) -> int:
        return sum(len(s.ids) - s.prompt_len for s in self.sequences)


def feature_stats(sequences: list[Sequence], max_tokens: int = 200_000) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-dimension mean and std (L*H_t,) of the features, over up to `max_tokens` positions."""
    if not sequences:
        raise ValueError("feature statistics need at least one sequence")
    total, sq, count = None, None, 0
    for s in sequences:
        f = s.features.double()  # (T-1, L*H_t)
        total = f.sum(0) if total is None else total + f.sum(0)
        sq = (f * f).sum(0) if sq is None else sq + (f * f).sum(0)
        count += f.shape[0]
        if count >= max_tokens:
            break
    mean = total / count
    std = (sq / count - mean * mean).clamp_min(0).sqrt()
    return mean.float(), std.float()


def draft_vocabulary(sequences: list[Sequence], size: int, required: list[int], vocab_size: int) -> torch.Tensor:
    """The V_d = `size` most frequent response tokens, `required` ids first; ties and the
    remainder filled by ascending id (BPE merge order, a corpus-frequency prior)."""
    counts = Counter()
    for s in sequences:
        counts.update(s.ids[s.prompt_len :].tolist())
    chosen = list(dict.fromkeys(int(i) for i in required))
    seen = set(chosen)
    for tok, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(chosen) >= size:
            break
        if tok not in seen:
            chosen.append(tok)
            seen.add(tok)
    tok = 0
    while len(chosen) < size and tok < vocab_size:
        if tok not in seen:
            chosen.append(tok)
            seen.add(tok)
        tok += 1
    return torch.tensor(chosen[:size], dtype=torch.long)


def vocab_lookup(draft_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(V,) map target id -> draft index, IGNORE for ids outside the draft vocabulary."""
    table = torch.full((vocab_size,), IGNORE, dtype=torch.long)
    table[draft_ids] = torch.arange(len(draft_ids))
    return table


def coverage(sequences: list[Sequence], draft_ids: torch.Tensor, vocab_size: int) -> float:
    """Fraction of response tokens inside the draft vocabulary."""
    table = vocab_lookup(draft_ids, vocab_size)
    hit = total = 0
    for s in sequences:
        r = table[s.ids[s.prompt_len :]]
        hit += int((r != IGNORE).sum())
        total += r.numel()
    return hit / max(total, 1)


def make_batch(
    sequences: list[Sequence],
    anchors: list[list[int]],
    n: int,
    clean: int,
    mask_id: int,
    lookup: torch.Tensor,
    reveal: torch.Tensor | None = None,
) -> Batch:
    """Blocks `[ids[p], ids[p+1..p+clean], MASK x n]` for the anchors p of each sequence.

    Every row must have the same number K of anchors. Context of a block = features < p.
    Soft labels have the width k of the sequences' top-k (0 when none has one). `reveal` (B, K, n)
    bool shows those mask slots their true token instead, clean and without a label: a block an
    iterative drafter has partly fixed (`drafters.iterative`).
    """
    k = len(anchors[0])
    if any(len(a) != k for a in anchors) or len(anchors) != len(sequences):
        raise ValueError("make_batch needs the same number of anchors for every sequence")
    q = 1 + clean + n
    b = len(sequences)
    t = max(max(a) for a in anchors)  # features needed: positions < max anchor
    t = max(t, 1)
    dim = sequences[0].features.shape[1]
    features = torch.zeros(b, t, dim)
    block_ids = torch.full((b, k, q), mask_id, dtype=torch.long)
    labels = torch.full((b, k, q), IGNORE, dtype=torch.long)
    width = max((s.topk_ids.shape[1] for s in sequences if s.topk_ids is not None), default=0)
    soft_ids = torch.full((b, k, q, width), IGNORE, dtype=torch.long)
    soft_probs = torch.zeros(b, k, q, width)
    offs = torch.arange(q)
    for row, (s, ps) in enumerate(zip(sequences, anchors)):
        m = min(t, s.features.shape[0])
        features[row, :m] = s.features[:m].float()
        length = len(s.ids)
        for j, p in enumerate(ps):
            if not s.prompt_len - 1 <= p < length - 1:
                raise ValueError(f"anchor {p} is not a response anchor of a sequence of length {length}")
            pos = p + offs  # (Q,)
            valid = pos < length
            tok = torch.where(valid, s.ids[pos.clamp(max=length - 1)], torch.full_like(pos, IGNORE))
            clean_end = min(1 + clean, q)
            block_ids[row, j, :clean_end] = torch.where(valid[:clean_end], tok[:clean_end], mask_id)
            lab = torch.where(valid, lookup[tok.clamp(min=0)], torch.full_like(tok, IGNORE))
            labels[row, j, 1 + clean :] = lab[1 + clean :]
            if s.topk_ids is not None:
                src = (pos[1 + clean :] - 1).clamp(max=length - 2)  # (n,) rows whose next token is the slot's
                kk = s.topk_ids.shape[1]  # shards made with a smaller --topk fill the first kk columns
                top = lookup[s.topk_ids[src].long()]  # (n, kk) draft indices or IGNORE
                keep = valid[1 + clean :, None] & (top != IGNORE)
                soft_ids[row, j, 1 + clean :, :kk] = torch.where(keep, top, IGNORE)
                soft_probs[row, j, 1 + clean :, :kk] = torch.where(keep, s.topk_probs[src].float(), 0.0)
    positions = torch.tensor(anchors)[..., None] + offs  # (B, K, Q)
    mask = torch.zeros(b, k, q, dtype=torch.bool)
    mask[..., 1 + clean :] = True
    slot = torch.zeros(b, k, q, dtype=torch.long)
    slot[..., 1 + clean :] = torch.arange(1, n + 1)
    if reveal is not None:
        if tuple(reveal.shape) != (b, k, n):
            raise ValueError(f"reveal must be ({b}, {k}, {n}), got {tuple(reveal.shape)}")
        shown = torch.zeros(b, k, q, dtype=torch.bool)
        shown[..., 1 + clean :] = reveal.bool() & (labels[..., 1 + clean :] != IGNORE)  # true tokens only
        truth = torch.stack([_block_truth(s, ps, q) for s, ps in zip(sequences, anchors)])  # (B, K, Q)
        block_ids = torch.where(shown, truth, block_ids)
        mask, labels, slot = mask & ~shown, labels.masked_fill(shown, IGNORE), slot.masked_fill(shown, 0)
        soft_ids, soft_probs = (
            soft_ids.masked_fill(shown[..., None], IGNORE),
            soft_probs.masked_fill(shown[..., None], 0),
        )
    return Batch(features, block_ids, positions, torch.tensor(anchors), mask, labels, slot, soft_ids, soft_probs)


def _block_truth(s: Sequence, anchors: list[int], q: int) -> torch.Tensor:
    """(K, Q) the sequence's tokens at each block's positions (the last one where they run out)."""
    pos = torch.tensor(anchors)[:, None] + torch.arange(q)
    return s.ids[pos.clamp(max=len(s.ids) - 1)]


def random_reveal(rng: torch.Generator, b: int, k: int, n: int) -> torch.Tensor:
    """(B, K, n) slots to reveal: per block a share r ~ U(0, 1), each slot shown with probability r,
    never all n (a pass always has a position left to predict), as Fast-dLLM trains its masking."""
    share = torch.rand(b, k, 1, generator=rng)
    reveal = torch.rand(b, k, n, generator=rng) < share
    full = reveal.all(-1)  # (B, K)
    keep = torch.randint(n, (b, k), generator=rng)
    reveal[full, keep[full]] = False
    return reveal


def sample_batch(
    pool: list[Sequence],
    rng: torch.Generator,
    seqs: int,
    blocks: int,
    n: int,
    clean: int,
    mask_id: int,
    lookup: torch.Tensor,
    reveal: bool = False,
) -> Batch:
    """`seqs` random sequences x `blocks` anchors drawn uniformly over each one's response anchors;
    with `reveal`, each block's mask slots partly shown (`random_reveal`)."""
    rows = torch.randint(len(pool), (seqs,), generator=rng).tolist()
    chosen, anchors = [], []
    for r in rows:
        s = pool[r]
        a = s.anchors
        if clean:  # a clean prefix of `clean` tokens must exist after the anchor
            a = range(a.start, max(a.start + 1, a.stop - clean))
        idx = torch.randint(len(a), (blocks,), generator=rng).tolist()
        chosen.append(s)
        anchors.append([a[i] for i in idx])
    shown = random_reveal(rng, seqs, blocks, n) if reveal else None
    return make_batch(chosen, anchors, n, clean, mask_id, lookup, shown)
