"""The look-up and hybrid drafters: the suffix index, lossless greedy and sampled decoding with
every mode, AR steps (d = 0) where nothing matches, token sources, calibration files and the
fallback to the block-diffusion drafter."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import torch
from decoding import check_caches
from test_sampling import V, chi2_quantile
from test_sampling import pair as v6_pair  # noqa: F401  (fixture)

import libraspec.engine as engine
from libraspec.cost import LatencyProfile, drafting_s
from libraspec.drafters import drafter_with_fallback, make_drafter
from libraspec.drafters.lookup import (
    CORPUS_MAX_MATCH,
    MAX_MATCH,
    MIN_MATCH,
    SEPARATOR,
    CorpusIndex,
    LookupCalibration,
    LookupCalibrationError,
    LookupDrafter,
    SuffixIndex,
    load_corpus,
    save_corpus,
)
from libraspec.engine import DecodeConfig, SpeculativeDecoder
from libraspec.models.registry import tiny_pair
from libraspec.modes import MODES, make_policy

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=70)


def brute_longest_match(seq: list[int], tail: list[int], longest: int = MAX_MATCH) -> tuple[int, list[int]]:
    """(k, every end) of the longest suffix of `tail` (k <= longest) that occurs in seq."""
    for k in range(min(longest, len(tail)), MIN_MATCH - 1, -1):
        ends = [e for e in range(k, len(seq) + 1) if seq[e - k : e] == tail[-k:]]
        if ends:
            return k, ends
    return 0, []


def test_suffix_index_matches_brute_force_and_truncates():
    rng = random.Random(0)
    for _ in range(200):
        seq = [rng.randrange(4) for _ in range(rng.randrange(0, 40))]
        tail = [rng.randrange(4) for _ in range(rng.randrange(1, 10))]
        index = SuffixIndex()
        index.append(seq)
        k, ends = brute_longest_match(seq, tail)
        assert index.matches(tail) == (k, ends[-16:])
        cut = rng.randrange(0, len(seq) + 1)
        index.truncate(cut)
        k, ends = brute_longest_match(seq[:cut], tail)
        assert index.matches(tail) == (k, ends[-16:])


def test_corpus_index_matches_brute_force_within_sequences():
    """The suffix array finds the longest suffix (up to CORPUS_MAX_MATCH) and only real occurrences,
    spread over all of them when there are more than 16; no match spans a separator."""
    rng = random.Random(1)
    for trial in range(150):
        sequences = [[rng.randrange(3) for _ in range(rng.randrange(0, 30))] for _ in range(rng.randrange(1, 5))]
        if trial % 5 == 0:  # long repeats: matches longer than MAX_MATCH and many occurrences
            sequences.append([0, 1, 2] * 12)
        flat = [t for seq in sequences for t in seq + [SEPARATOR]]
        index = CorpusIndex(flat)
        tail = [rng.randrange(3) for _ in range(rng.randrange(1, 24))]
        if trial % 5 == 0:
            tail = [2, 0, 1, 2] * 5
        k, ends = index.matches(tail)
        # a brute force within each sequence, with ends in the flat corpus's coordinates
        want_k = max((brute_longest_match(seq, tail, CORPUS_MAX_MATCH)[0] for seq in sequences), default=0)
        every, offset = [], 0
        for seq in sequences:
            kk, found = brute_longest_match(seq, tail, CORPUS_MAX_MATCH)
            every += [offset + e for e in found] if kk == want_k and kk else []
            offset += len(seq) + 1
        assert k == want_k
        assert set(ends) <= set(every) and len(ends) == min(16, len(every)) and ends == sorted(ends)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama", seed=3, dtype=torch.float64)


def repetitive_prompts():
    rng = random.Random(5)
    phrase = [rng.randrange(3, 259) for _ in range(6)]
    return [phrase * 3 + phrase[:2], [rng.randrange(3, 259) for _ in range(9)], [42]]


def generated(records):
    return [t for r in records for t in r.committed_tokens]


def decode(decoder, prompt, mode, **config):
    policy = (
        None
        if MODES[mode].factory is None
        else make_policy(mode, decoder.n, decoder.profile, d_max=30, static_length=7)
    )
    return list(decoder.run(prompt, mode, policy, DecodeConfig(**config)))


@pytest.mark.parametrize("drafter", ["lookup", "hybrid"])
def test_greedy_lossless_every_mode(pair, drafter):
    """Greedy output equals AR for every mode; look-up tokens are marked, AR steps (d = 0) happen."""
    plain = SpeculativeDecoder(pair, PROFILE)
    decoder = SpeculativeDecoder(pair, PROFILE, drafter=drafter)
    sources, lengths = set(), []
    for prompt in repetitive_prompts():
        reference = generated(decode(plain, prompt, "ar", max_new_tokens=40))
        for mode in MODES:
            records = decode(decoder, prompt, mode, max_new_tokens=40, annotate_oracle=True, lookahead=30)
            assert generated(records) == reference, (drafter, mode, prompt)
            for r in records:
                assert len(r.draft_sources) == len(r.draft_tokens)
                sources.update(r.draft_sources)
                lengths.append(r.chosen_length)
    assert "lookup" in sources and max(lengths) > 7
    if drafter == "lookup":
        assert 0 in lengths and sources == {"lookup"}
    else:
        assert sources == {"lookup", "dflash"}


@pytest.mark.parametrize("drafter", ["lookup", "hybrid"])
def test_sampled_runs_keep_caches_exact(pair, drafter):
    decoder = SpeculativeDecoder(pair, PROFILE, drafter=drafter)
    checked = check_caches(decoder, tolerance=1e-4)  # float32: a prefill and cached forwards round apart
    for mode in ("static", "libraspec", "oracle"):
        records = decode(decoder, repetitive_prompts()[0], mode, max_new_tokens=30, temperature=1.0, seed=3)
        assert records[-1].finished and sum(r.tau for r in records) <= 30
    assert len(checked) > 10


def test_hybrid_times_a_step_once_and_prices_the_proposal_it_drops(pair, monkeypatch):
    """A hybrid step runs both drafters and keeps one: its measured time is the step's wall clock
    (the dropped proposal inside it, not added a second time), and the model prices both."""
    import time

    from libraspec.verify import SamplingConfig

    drafter = make_drafter("hybrid", pair)
    kept = set()
    for ids in repetitive_prompts()[:2]:
        context, cache = drafter.new_context(), pair.target.new_cache()
        drafter.fit_context(context, ids, pair.target.forward(cache, ids[:-1]).hidden_states, 0)
        ticks = iter(range(10**6))
        monkeypatch.setattr(time, "perf_counter", lambda: float(next(ticks)))  # one second a call
        buffer = drafter.start_round(context, ids, SamplingConfig())
        start = time.perf_counter()
        buffer.extend(2)
        wall = time.perf_counter() - start
        monkeypatch.undo()
        assert buffer.draft_seconds(2) == sum(buffer.step_seconds) <= wall
        ((step, dropped),) = [d for d in buffer.discarded if d[0] == 0]
        kept.add(buffer.step_sources[0])
        assert dropped != buffer.step_sources[0]
        assert drafting_s(PROFILE, buffer.steps_run(1)) == pytest.approx(PROFILE.draft_time(1) + PROFILE.lookup_s)
    assert kept == {"lookup", "dflash"}  # the repetitive prompt keeps the look-up, the other the diffusion pass


def test_a_hybrid_round_drops_what_its_kept_sources_say_and_is_priced_as_it_ran():
    """The look-up is kept for two steps and then finds nothing: the round ran both proposals of
    its first step, the dry look-up of its third and block diffusion after; the step-through's
    price of the recorded round (`round_drafting`) equals the engine's price of the steps that ran."""
    from libraspec.cost import chain_round_s
    from libraspec.drafters import round_drafting
    from libraspec.drafters.hybrid import HybridDraft
    from libraspec.verify import SamplingConfig

    ran = []  # the source of every proposal made, in order

    class Canned:  # one source: each step's confidences from a list, its last repeating
        def __init__(self, source, steps):
            self.source, self.steps, self.empty = source, steps, False
            self.n, self.vocab_size, self.sampling = 2, 8, SamplingConfig()

        def propose(self, chain):
            ran.append(self.source)
            q = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
            return [1, 2], q, None, self.source

    buffer = HybridDraft(Canned("dflash", [[0.5, 0.5]]), Canned("lookup", [[0.9, 0.9], [0.9, 0.9], [0.0, 0.0]]))
    buffer.extend(4)
    assert buffer.step_sources == ["lookup", "lookup", "dflash", "dflash"]
    assert buffer.discarded == [(0, "dflash"), (2, "lookup")]
    assert sorted(buffer.steps_run(4)) == sorted(ran)  # what is priced is what ran, proposal by proposal
    recorded = round_drafting("hybrid", buffer.sources[:: buffer.n])
    profile = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=2, max_tokens=16)
    profile = dataclasses.replace(profile, lookup_s=0.0004, fit_s=0.003)
    for d in range(1, 9):
        engine = chain_round_s(profile, buffer.steps_run(-(-d // 2)), d, needs_features=True)
        assert profile.round_time(d, recorded) == pytest.approx(engine)


def test_prompt_at_the_context_limit(pair):
    decoder = SpeculativeDecoder(pair, PROFILE, drafter="lookup")
    window = pair.target.max_positions
    prompt = (repetitive_prompts()[0] * window)[: window - 1]
    for mode in MODES:
        records = decode(decoder, prompt, mode, max_new_tokens=8)
        assert len(generated(records)) == 1 and records[-1].finished


def lookup_chi2(pair, drafter: str, draws: int = 1200) -> tuple[float, float]:
    """Chi-square of the first two tokens of `draws` draws against the exact target distribution;
    static d = 2 verifies both look-up drafts in one round (max_new_tokens = 3 leaves room for d = 2)."""
    prompt = [1, 4, 3, 5, 1, 4, 3, 5, 1, 4]
    model = pair.target.model
    with torch.no_grad():
        p1 = torch.softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1].double(), -1)  # (V,)
        p2 = torch.softmax(model(input_ids=torch.tensor([prompt + [x] for x in range(V)])).logits[:, -1].double(), -1)
    expected = (p1[:, None] * p2).flatten() * draws  # (V * V,)
    decoder = SpeculativeDecoder(pair, LatencyProfile.from_linear(0.05, 0.004, 0.01, pair.n, 16), drafter=drafter)
    counts = torch.zeros(V * V)
    lengths = []
    for seed in range(draws):
        records = list(
            decoder.run(
                prompt,
                "static",
                make_policy("static", decoder.n, static_length=2),
                DecodeConfig(max_new_tokens=3, temperature=1.0, seed=seed),
            )
        )
        out = generated(records)
        counts[out[0] * V + out[1]] += 1
        lengths.append(records[0].chosen_length)
    assert max(lengths) == 2  # two drafts verified at once
    keep = expected >= 5
    obs = torch.cat([counts[keep], counts[~keep].sum().view(1)])
    exp = torch.cat([expected[keep], expected[~keep].sum().view(1)])
    obs, exp = obs[exp > 0], exp[exp > 0]
    return float(((obs - exp) ** 2 / exp).sum()), chi2_quantile(len(exp) - 1)


def test_sampling_with_lookup_drafts_matches_target(v6_pair):  # noqa: F811
    """Look-up drafts under the chi-square test (hybrid drafting, and every mode with both, is proved
    exactly by tests/test_exact_sampling.py on this pair)."""
    statistic, threshold = lookup_chi2(v6_pair, "lookup")
    print(f"look-up: chi-square {statistic:.1f}, threshold {threshold:.1f}")
    assert statistic < threshold, f"chi-square {statistic:.1f} >= {threshold:.1f}"


def test_lookup_sampling_test_can_fail(v6_pair, monkeypatch):  # noqa: F811
    """Accepting a one-hot draft whenever u < q (= 1) instead of u < p(x) is caught."""

    def accept_everything(drafts, draft_probs, target_logits, cfg, rng):
        return drafts.shape[0], rng.sample(torch.softmax(target_logits[-1].double() / cfg.temperature, -1))

    monkeypatch.setattr(engine, "sample_accept", accept_everything)
    statistic, threshold = lookup_chi2(v6_pair, "lookup", draws=600)  # fails by more with more draws
    print(f"accepting every look-up draft: chi-square {statistic:.1f}, threshold {threshold:.1f}")
    assert statistic > 3 * threshold


def test_calibration_file_problems_fall_back_to_the_block_drafter(pair, tmp_path, monkeypatch):
    import libraspec.drafters.lookup as lookup

    for content in (None, "{not json", json.dumps({"weights": [1.0, 2.0]})):
        path = tmp_path / "calibration.json"
        path.unlink(missing_ok=True)
        if content is not None:
            path.write_text(content)
        with pytest.raises(LookupCalibrationError, match="missing" if content is None else "damaged"):
            LookupCalibration.load(path)
        monkeypatch.setattr(lookup, "DEFAULT_CALIBRATION", path)
        drafter, note = drafter_with_fallback("hybrid", pair)
        assert drafter.name == "dflash" and "lookup_fit" in note and "dflash" in note
    with pytest.raises(ValueError, match="unknown drafter"):
        make_drafter("telepathy", pair)


def test_lookup_drafts_nothing_without_a_match(pair):
    drafter = LookupDrafter(7, pair.target.vocab_size)
    context = drafter.new_context()
    ids = [10, 11, 12, 13]
    drafter.fit_context(context, ids, None, 0)
    draft = drafter.start_round(context, ids, engine.SamplingConfig())
    draft.extend(1)
    assert draft.empty and draft.confidences.tolist() == [0.0] * 7


def test_corpus_matches_draft_text_the_sequence_has_not_seen(pair, tmp_path):
    """A phrase from the pair's past outputs is drafted the first time the sequence reaches it,
    marked as a corpus match; the sequence's own match wins when it has one; a corpus with foreign
    token ids, or a damaged file, is refused with a message that says how to repair it."""
    phrase = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49]
    path = tmp_path / "corpus.npz"
    save_corpus(path, [[7, 8] + phrase, [9] + phrase[:4]], {"test": True})
    corpus = load_corpus(path, pair.target.vocab_size)
    drafter = LookupDrafter(7, pair.target.vocab_size, corpus=corpus)
    context = drafter.new_context()
    ids = [100, 101, 102] + phrase[:3]
    drafter.fit_context(context, ids, None, 0)
    draft = drafter.start_round(context, ids, engine.SamplingConfig())
    draft.extend(1)
    assert draft.tokens == phrase[3:10] and all(f[-1] for f in draft.features)
    own = [41, 42, 200, 201, 202, 203, 204, 205, 206]  # the sequence itself continues 41 42 with 200...
    ids = own + [100, 40, 41, 42]
    context = drafter.new_context()
    drafter.fit_context(context, ids, None, 0)
    draft = drafter.start_round(context, ids, engine.SamplingConfig())
    draft.extend(1)
    assert draft.tokens[:7] == own[2:9] and not any(f[-1] for f in draft.features)
    save_corpus(path, [[pair.target.vocab_size + 5]], {})
    with pytest.raises(LookupCalibrationError, match="outside the vocabulary"):
        load_corpus(path, pair.target.vocab_size)
    path.write_bytes(b"not a corpus")
    with pytest.raises(LookupCalibrationError, match="damaged.*lookup_corpus"):
        load_corpus(path, pair.target.vocab_size)
    with pytest.raises(LookupCalibrationError, match="missing"):
        load_corpus(tmp_path / "absent.npz", pair.target.vocab_size)


def test_shipped_corpus_is_the_selfgen_responses_without_the_held_apart_ones():
    """assets/lookup_corpus.npz is exactly what `lookup_corpus` builds from assets/selfgen, and none of
    the responses the confidence model is fitted and checked on (`held_apart`) is in it."""
    import numpy as np

    from libraspec.drafters.lookup import DEFAULT_CORPUS
    from libraspec.train.lookup_corpus import corpus_sequences, held_apart, sequences

    with np.load(DEFAULT_CORPUS) as data:
        shipped = data["ids"].tolist()
    built, _ = corpus_sequences()
    assert shipped == [t for seq in built for t in seq + [SEPARATOR]]
    held = {tuple(ids[start:]) for index, ids, start in sequences("magpie_ids") if held_apart("magpie_ids", index)}
    assert len(held) > 250 and not held & {tuple(seq) for seq in built}
