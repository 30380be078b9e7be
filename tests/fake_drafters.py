"""Test-double drafters with the DFlashDrafter interface: always right, always wrong.

They read the context tokens back from the target's embedding-layer output (hidden state 0),
which is an exact table lookup, so they need no access to engine internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import torch


@dataclass
class TokenCache:
    tokens: list = field(default_factory=list)

    @property
    def length(self) -> int:
        return len(self.tokens)


class GreedyOracleDrafter(torch.nn.Module):
    """Proposes the target's own greedy continuation (every draft accepted under greedy).

    `wrong=True` proposes a token different from it instead (no draft ever accepted).
    `right_for=k` is right for the first k drafts of each pass and wrong after them, so
    greedy rounds accept part of a draft (0 < a < d).
    `confidence` is the probability it reports for its proposal (q_i).
    `runner_up` lists the positions of each pass (0-based) where the target's token comes second,
    with probability 0.3, behind a wrong token with 0.6: a chain misses it, a draft tree need not.
    """

    def __init__(
        self,
        target,
        block_size: int = 8,
        wrong: bool = False,
        confidence: float = 1.0,
        right_for: int | None = None,
        runner_up: tuple[int, ...] = (),
    ):
        super().__init__()
        self.target = target
        self.block_size = block_size
        self.right_for = 0 if wrong else right_for
        self.confidence = confidence
        self.runner_up = tuple(runner_up)
        self.embedding = target.model.get_input_embeddings().weight
        self.target_layer_ids = [0]
        self.config = SimpleNamespace(
            mask_token_id=0,
            vocab_size=target.vocab_size,
            hidden_size=target.hidden_size,
            target_hidden_size=target.hidden_size,
        )
        self._anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
        self._memo: dict[tuple, int] = {}  # greedy next token of each sequence seen

    @property
    def n(self) -> int:
        return self.block_size - 1

    def new_cache(self) -> TokenCache:
        return TokenCache()

    def target_features(self, hidden_states):
        return hidden_states[0]  # (1, T, H): the embedding-layer output

    def extend_context(self, cache, features, positions) -> None:
        dist = torch.cdist(features[0].detach().double(), self.embedding.detach().double())  # (T, V)
        cache.tokens.extend(dist.argmin(dim=-1).tolist())

    def crop(self, cache, length: int) -> None:
        del cache.tokens[length:]

    def to_target_ids(self, ids):
        return ids

    def to_full_vocab(self, probs):
        return probs

    @torch.inference_mode()
    def _greedy_next(self, seq: tuple) -> int:
        if seq not in self._memo:
            self._memo[seq] = int(self.target.model(input_ids=torch.tensor([seq])).logits[0, -1].argmax())
        return self._memo[seq]

    def draft_logits(self, cache, block_ids, positions, mask=None):
        ids = block_ids[0].tolist()
        n = self.n
        seq = cache.tokens + ids[: len(ids) - n]
        out = []
        for i in range(n):
            token = self._greedy_next(tuple(seq))
            wrong = self.right_for is not None and i >= self.right_for
            out.append((token + 1) % self.config.vocab_size if wrong else token)
            seq.append(token)
        V = self.config.vocab_size
        rest = (1.0 - self.confidence) / (V - 1)
        probs = torch.full((len(ids), V), rest, dtype=torch.float64)
        probs[torch.arange(len(ids) - n, len(ids)), torch.tensor(out)] = self.confidence
        for i in self.runner_up:
            row = len(ids) - n + i
            probs[row] = 0.1 / (V - 2)
            probs[row, out[i]], probs[row, (out[i] + 1) % V] = 0.3, 0.6
        return probs.clamp_min(1e-30).log().unsqueeze(0)  # (1, Q, V)


@dataclass
class BothCache:
    """The real module's K/V context and the committed tokens, kept side by side."""

    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)
    tokens: list = field(default_factory=list)

    @property
    def length(self) -> int:
        return len(self.tokens)


class PartlyRightModule(torch.nn.Module):
    """A pair's real block-diffusion module for the context (K/V over target features, so context
    bugs show), proposing the drafts of a GreedyOracleDrafter right for `right_for` of each pass."""

    def __init__(self, pair, right_for: int):
        super().__init__()
        self.real = pair.drafter
        self.oracle = GreedyOracleDrafter(pair.target, block_size=pair.drafter.block_size, right_for=right_for)
        self.block_size, self.config = self.real.block_size, self.real.config
        self.target_layer_ids = self.real.target_layer_ids
        self._width = None

    @property
    def n(self) -> int:
        return self.real.n

    def new_cache(self) -> BothCache:
        return BothCache()

    def target_features(self, hidden_states):
        real = self.real.target_features(hidden_states)  # (1, T, L*H)
        self._width = real.shape[-1]
        return torch.cat([real, hidden_states[0].to(real.dtype)], dim=-1)  # the embeddings carry the tokens

    def extend_context(self, cache, features, positions) -> None:
        self.real.extend_context(cache, features[..., : self._width], positions)
        self.oracle.extend_context(cache, features[..., self._width :], positions)

    def crop(self, cache, length: int) -> None:
        self.real.crop(cache, length)
        del cache.tokens[length:]

    def to_target_ids(self, ids):
        return ids

    def to_full_vocab(self, probs):
        return probs

    def draft_logits(self, cache, block_ids, positions, mask=None):
        return self.oracle.draft_logits(cache, block_ids, positions)


def toy_sequences(pair, count: int, length: int = 40, seed: int = 1, prompts=()) -> list:
    """The tiny target's own greedy continuations of `prompts` and of random 6-token prompts (`count`
    in all) as training sequences (`train.data.Sequence`: ids, features of the pair's EAGLE-style
    head's taps, top-4), each `length` tokens past its prompt's start."""
    from libraspec.train.data import Sequence

    gen, seqs = torch.Generator().manual_seed(seed), []
    model = pair.target.model
    for i in range(count):
        ids = (
            list(prompts[i])
            if i < len(prompts)
            else torch.randint(3, pair.target.vocab_size, (6,), generator=gen).tolist()
        )
        plen, length_i = len(ids), len(ids) + length - 6
        with torch.no_grad():
            while len(ids) < length_i:
                ids.append(int(model(input_ids=torch.tensor([ids], device=model.device)).logits[0, -1].argmax()))
            out = model(input_ids=torch.tensor([ids], device=model.device), output_hidden_states=True)
        feats = pair.eagle.target_features(out.hidden_states)[0, :-1].cpu()
        top = torch.softmax(out.logits[0, :-1].float().cpu(), -1).topk(4, -1)
        seqs.append(Sequence(torch.tensor(ids), plen, feats.half(), top.indices.int(), top.values.half()))
    return seqs


def trained_eagle(pair, steps: int = 60, sequences: int = 9, prompts=()):
    """A copy of the pair's random EAGLE-style head trained `steps` steps (the project's loss, three
    unrolled passes) on the tiny target's own text after `prompts` and random ones: on those
    texts its drafts are right often, not always."""
    from libraspec.models.eagle import EagleHead
    from libraspec.train.eagle import loss_of, make_batch

    model = pair.target.model
    head = EagleHead(pair.eagle.config, model.get_input_embeddings(), model.get_output_embeddings())
    head = head.to(pair.eagle.fc.weight.dtype)
    head.load_state_dict(pair.eagle.state_dict())
    head.train()
    train = toy_sequences(pair, sequences, prompts=prompts)
    lookup = torch.arange(pair.target.vocab_size)
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=3e-3)
    spans = [(0, len(s.ids) - 2) for s in train]
    for _ in range(steps):
        loss, _ = loss_of(head, make_batch(train, spans, lookup, 3), 3, 0.5, 0.8)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return head.eval()
