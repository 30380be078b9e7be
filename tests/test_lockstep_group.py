"""Lock-step groups (analysis/regimes.py `lockstep`, libraspec/group.py): per-request modes priced
padded as before (their figures pinned), padded and ragged prices worked by hand, a group policy's
decisions honoured round by round, every request's greedy text equal to its trace's, and both
prices non-decreasing in every request's d. Hand-made traces and profiles: no model runs."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from libraspec.analysis.regimes import lockstep
from libraspec.analysis.trace import DraftTrace
from libraspec.cost import LatencyProfile, drafting_s
from libraspec.group import Batch, GlobalBudget, forward_s
from libraspec.spec import RunSpec

LAYER = "unit"  # tests/conftest.py

V = 40  # vocabulary of the hand-made traces
N = 3  # drafts per drafting step
STEPS = 4  # steps traced per anchor: 12 drafts


def hand_trace(
    seed: int, length: int, drafter: str = "dflash", prompt_len: int = 4, all_right: bool = False
) -> DraftTrace:
    """A trace made by hand: a random greedy text, and at every anchor g a chain whose first m_g
    drafts equal the text from g on (m_g random, 0..12) and whose later drafts differ; q is high
    (0.55..1) on the matching drafts and low (0..0.6) after. A look-up trace has empty anchors (its
    first step found nothing); a hybrid one mixes the sources by step and discards a look-up
    proposal at some anchors' first step. `all_right`: every draft right, q = 0.9."""
    rng = np.random.default_rng(seed)
    prompt = tuple(int(t) for t in rng.integers(3, V, prompt_len))
    output = tuple(int(t) for t in rng.integers(3, V, length))
    width = STEPS * N
    tokens = np.zeros((length, width), dtype=np.int64)
    q = np.zeros((length, width))
    steps = np.full(length, STEPS, dtype=np.int64)
    empty = np.zeros(length, dtype=bool)
    cand_tokens = np.full((length, width, 4), -1, dtype=np.int64)
    cand_probs = np.zeros((length, width, 4))
    sources, discarded = [], []
    for g in range(length):
        if drafter == "lookup" and not all_right and rng.random() < 0.2:  # nothing matched: an AR step
            empty[g], steps[g] = True, 1
            sources.append(("lookup",))
            discarded.append(())
            continue
        m = width if all_right else int(rng.integers(0, width + 1))
        for i in range(width):
            right = output[g + i] if g + i < length else 3
            wrong = (right - 3 + 1 + int(rng.integers(0, V - 4))) % (V - 3) + 3
            tokens[g, i] = right if i < m and g + i < length else wrong
            q[g, i] = 0.9 if all_right else rng.uniform(0.55, 1.0) if i < m else rng.uniform(0.0, 0.6)
            cand_tokens[g, i, 0], cand_probs[g, i, 0] = tokens[g, i], q[g, i]
            runner = right if tokens[g, i] != right else wrong
            cand_tokens[g, i, 1], cand_probs[g, i, 1] = runner, (1 - q[g, i]) / 2
        if drafter == "hybrid":
            kept = tuple("lookup" if rng.random() < 0.4 else "dflash" for _ in range(STEPS))
            sources.append(kept)
            discarded.append(((0, "lookup"),) if kept[0] == "dflash" and rng.random() < 0.5 else ())
        else:
            sources.append((drafter,) * STEPS)
            discarded.append(())
    return DraftTrace(
        prompt=prompt,
        output=output,
        drafter=drafter,
        n=N,
        needs_features=drafter != "lookup",
        vocab_size=V,
        max_positions=1 << 16,
        eos_ids=(),
        max_new_tokens=length,
        tokens=tokens,
        q=q,
        steps=steps,
        step_sources=tuple(sources),
        discarded=tuple(discarded),
        empty=empty,
        cand_tokens=cand_tokens,
        cand_probs=cand_probs,
    )


def hand_traces(drafter: str) -> list[DraftTrace]:
    """Three requests of different lengths (they finish in different lock-step rounds)."""
    return [hand_trace(seed, length, drafter) for seed, length in ((1, 23), (2, 31), (3, 17))]


def hand_profiles() -> dict[int, LatencyProfile]:
    """Batch 1 linear, batch 2 bent (flat, then steep), batch 4 linear and steep; look-up steps and
    the drafter's upkeep priced."""
    one = LatencyProfile.from_linear(0.05, 0.004, 0.01, N, max_tokens=14)
    one = dataclasses.replace(one, lookup_s=0.0005, fit_s=0.002)
    bent = [0.06, 0.06, 0.061, 0.07, 0.085, 0.1, 0.12, 0.14, 0.16, 0.18, 0.2, 0.22, 0.24, 0.26]
    two = dataclasses.replace(one, verify_s=tuple(bent))
    four = dataclasses.replace(one, verify_s=tuple(0.07 + 0.03 * k for k in range(1, 15)))
    return {1: one, 2: two, 4: four}


def check_profiles() -> dict[int, LatencyProfile]:
    """Concurrency profiles as `profiling.cached_concurrency` gives them (B = 1, 2, 4, 8), their
    forwards non-decreasing in k but neither linear nor concave (plateaus, a jump)."""
    one = hand_profiles()[1]
    shapes = {
        1: [0.05, 0.05, 0.052, 0.052, 0.06, 0.061, 0.07, 0.07, 0.071, 0.09],
        2: [0.06, 0.061, 0.061, 0.08, 0.08, 0.081, 0.1, 0.1, 0.13, 0.13],
        4: [0.07, 0.08, 0.09, 0.09, 0.12, 0.12, 0.15, 0.16, 0.16, 0.2],
        8: [0.09, 0.12, 0.15, 0.15, 0.2, 0.25, 0.25, 0.3, 0.32, 0.4],
    }
    return {B: dataclasses.replace(one, verify_s=tuple(v)) for B, v in shapes.items()}


class Chain:
    """A hand-made `ChainLike`: q in blocks of n, the first block drafted (as a round opens)."""

    def __init__(self, q, n: int = N, empty: bool = False, source: str = "dflash"):
        self.all_q, self.n, self.empty, self.source, self.blocks = np.asarray(q, dtype=float), n, empty, source, 1

    @property
    def confidences(self) -> np.ndarray:
        return self.all_q[: self.blocks * self.n]

    def extend(self, num_blocks: int) -> None:
        assert (self.blocks + num_blocks) * self.n <= len(self.all_q), "drafted past the hand-made chain"
        self.blocks += num_blocks

    def steps_run(self, steps: int) -> list[str]:
        return [self.source] * steps


class Planned:
    """A test group policy: request b's d in the group's r-th round is (r + 2 b) % 7, so the requests'
    lengths differ within a round and from round to round; it reads one block more of request 0's
    chain every round (that round must draft it), and keeps what it saw and what it was told."""

    name = "planned"
    d_max = 9

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.round, self.seen, self.told = 0, [], []

    @staticmethod
    def plan(r: int, b: int) -> int:
        return (r + 2 * b) % 7

    def choose_lengths(self, chains):
        if chains[0] is not None and not chains[0].empty:
            chains[0].extend(1)
        self.seen.append([None if c is None else (c.empty, c.confidences.copy()) for c in chains])
        out = [0 if c is None or c.empty else self.plan(self.round, b) for b, c in enumerate(chains)]
        self.round += 1
        return out

    def update(self, records) -> None:
        self.told.append(list(records))


def with_group(monkeypatch, name: str, group) -> str:
    """Register a chain mode whose group form is `group` (for this test only)."""
    from libraspec.modes import MODES, Mode
    from libraspec.policy import StaticPolicy

    mode = Mode(name, name, name, "#000000", "policy", lambda s: StaticPolicy(1), group=lambda s, batch: group)
    monkeypatch.setitem(MODES, name, mode)
    return name


TODAY = {  # lockstep(hand_traces(drafter), mode, hand_profiles(), SETTINGS) before group decisions existed
    ("dflash", "ar"): (2.152, 2.152, 31, 71, 71, 71, 0),
    ("dflash", "static"): (0.9149999999999999, 2.152, 6, 71, 74, 14, 60),
    ("dflash", "libraspec"): (1.05, 2.152, 6, 71, 73, 13, 60),
    ("dflash", "g4"): (0.913, 2.152, 4, 71, 74, 11, 63),
    ("dflash", "failfast"): (1.1630000000000003, 2.152, 5, 71, 80, 12, 68),
    ("dflash", "oracle"): (1.118, 2.152, 5, 71, 71, 12, 59),
    ("dflash", "ddtree"): (1.0835000000000004, 2.152, 8, 71, 93, 19, 53),
    ("dflash", "ddtree-priced"): (1.055, 2.152, 8, 71, 72, 19, 52),
    ("lookup", "ar"): (2.152, 2.152, 31, 71, 71, 71, 0),
    ("lookup", "static"): (1.0300000000000002, 2.152, 9, 71, 84, 19, 65),
    ("lookup", "libraspec"): (0.8785000000000001, 2.152, 6, 71, 76, 16, 60),
    ("lookup", "g4"): (1.1225, 2.152, 6, 71, 95, 15, 80),
    ("lookup", "failfast"): (1.0175, 2.152, 5, 71, 77, 13, 64),
    ("lookup", "oracle"): (0.9000000000000001, 2.152, 4, 71, 71, 11, 60),
    ("lookup", "ddtree"): (1.1920000000000002, 2.152, 10, 71, 92, 22, 51),
    ("lookup", "ddtree-priced"): (1.0779999999999998, 2.152, 12, 71, 73, 25, 46),
    ("hybrid", "ar"): (2.152, 2.152, 31, 71, 71, 71, 0),
    ("hybrid", "static"): (1.0, 2.152, 7, 71, 80, 15, 65),
    ("hybrid", "libraspec"): (1.0670000000000002, 2.152, 5, 71, 73, 13, 60),
    ("hybrid", "g4"): (0.9565, 2.152, 4, 71, 81, 12, 69),
    ("hybrid", "failfast"): (1.0295, 2.152, 6, 71, 83, 13, 70),
    ("hybrid", "oracle"): (1.0260000000000002, 2.152, 4, 71, 71, 11, 60),
    ("hybrid", "ddtree"): (1.1330000000000002, 2.152, 9, 71, 92, 20, 53),
    ("hybrid", "ddtree-priced"): (1.0705, 2.152, 9, 71, 72, 20, 51),
}
SETTINGS = RunSpec(alpha=2.2, d_max=9, static_length=5, node_budget=4)


@pytest.mark.parametrize("drafter", ["dflash", "lookup", "hybrid"])
def test_per_request_modes_in_lock_step_price_padded_as_before(drafter):
    """Every per-request mode's lock-step figures, padded (the default), equal the code's before group
    decisions and ragged prices were added (TODAY); ragged they never cost more, and the same rounds run."""
    traces, profiles = hand_traces(drafter), hand_profiles()
    for (name, mode), want in TODAY.items():
        if name != drafter:
            continue
        padded = lockstep(traces, mode, profiles, SETTINGS)
        assert padded == lockstep(traces, mode, profiles, SETTINGS, batching="padded")
        got = (padded.seconds, padded.ar_seconds, padded.rounds, padded.tokens, padded.verified_rows)
        assert got + (padded.request_rounds, padded.sum_d) == pytest.approx(want, rel=1e-12, abs=0), mode
        assert padded.batching == "padded" and padded.group == ""
        ragged = lockstep(traces, mode, profiles, SETTINGS, batching="ragged")
        assert ragged.batching == "ragged" and ragged.ar_seconds == padded.ar_seconds
        assert [[r.chosen_length for r in h] for h in ragged.records] == [
            [r.chosen_length for r in h] for h in padded.records
        ]
        assert ragged.seconds <= padded.seconds + 1e-12, mode
    with pytest.raises(ValueError, match="batching"):
        lockstep(traces, "static", profiles, SETTINGS, batching="flat")


def test_padded_and_ragged_forwards_worked_by_hand():
    """hand_profiles: batch 1 verifies k rows in 0.05 + 0.004 k s, batch 2 reads its bent table, batch
    4 0.07 + 0.03 k; batch 3 lies halfway between 2 and 4, batch 8 beyond the largest takes 4's."""
    P = hand_profiles()
    two = P[2].verify_s
    # two requests verifying 2 and 5 rows: padded pays 5 rows at batch 2, ragged 3.5 rows
    assert forward_s(P, [2, 5], "padded") == pytest.approx(two[4])  # 0.085
    assert forward_s(P, [2, 5], "ragged") == pytest.approx((two[2] + two[3]) / 2)  # (0.061 + 0.07) / 2
    # three requests of 1, 2 and 6 rows: padded 6 rows, ragged 9 / 3 = 3 rows, each halfway from batch 2 to 4
    assert forward_s(P, [1, 2, 6], "padded") == pytest.approx((0.1 + (0.07 + 0.03 * 6)) / 2)  # 0.175
    assert forward_s(P, [1, 2, 6], "ragged") == pytest.approx((0.061 + (0.07 + 0.03 * 3)) / 2)  # 0.1105
    # one request: both are its own forward at batch 1; eight requests of 1 row: batch 4's price
    assert forward_s(P, [4], "padded") == forward_s(P, [4], "ragged") == pytest.approx(0.05 + 0.004 * 4)
    assert forward_s(P, [1] * 8, "ragged") == pytest.approx(0.07 + 0.03)
    # a token-count table spreads tokens evenly: 5 tokens over 2 requests are rows 3 and 2
    batch = Batch(P, 2, "padded")
    assert batch.tokens_s(5, 2) == pytest.approx(two[2]) and Batch(P, 2, "ragged").tokens_s(5, 2) == pytest.approx(
        (two[1] + two[2]) / 2
    )
    # drafting: a step each by its source at batch 1, plus the upkeep when the drafter reads features
    assert batch.drafting_s(["dflash", "lookup"]) == pytest.approx(0.01 + 0.0005 + 0.002)
    assert Batch(P, 2, needs_features=False).drafting_s(["lookup"]) == pytest.approx(0.0005)
    with pytest.raises(ValueError, match="batching"):
        Batch(P, 2, "flat")
    with pytest.raises(ValueError, match="at least"):
        forward_s(P, [], "ragged")


def test_a_lock_step_run_priced_by_hand(monkeypatch):
    """Two requests of 4 and 2 tokens whose drafts are all right, the group choosing d = 2 and 1.
    Round 1: request 0 verifies 2 (3 rows), request 1 verifies 1 (2 rows, its room) and finishes.
    Round 2: request 0 has room for 1 token: d cut to 0 (1 row), one block drafted all the same.
    Each round drafts one block (0.01 s) and pays the upkeep (0.002 s)."""
    traces = [hand_trace(7, 4, all_right=True), hand_trace(8, 2, all_right=True)]

    class Fixed:
        name, d_max = "fixed", 9

        def choose_lengths(self, chains):
            return [2, 1]

        def update(self, records):
            pass

        def reset(self):
            pass

    mode = with_group(monkeypatch, "fixed", Fixed())
    P = hand_profiles()
    padded = lockstep(traces, mode, P, batching="padded")
    ragged = lockstep(traces, mode, P, batching="ragged")
    for run in (padded, ragged):
        assert [[r.chosen_length for r in h] for h in run.records] == [[2, 0], [1]]
        assert (run.rounds, run.tokens, run.verified_rows, run.request_rounds, run.sum_d) == (2, 6, 6, 3, 3)
        assert run.group == "fixed"
    # padded: 3 rows at batch 2 (0.061), then 1 row at batch 1 (0.054)
    assert padded.seconds == pytest.approx((0.01 + 0.061 + 0.002) + (0.01 + 0.054 + 0.002))  # 0.139
    # ragged: 5 tokens over 2 requests, 2.5 rows each, halfway between 0.06 and 0.061
    assert ragged.seconds == pytest.approx((0.01 + 0.0605 + 0.002) + (0.01 + 0.054 + 0.002))  # 0.1385
    # AR: 2 tokens at batch 2, then 2 at batch 1
    assert padded.ar_seconds == ragged.ar_seconds == pytest.approx(2 * 0.06 + 2 * 0.054)


@pytest.mark.parametrize("drafter", ["dflash", "lookup", "hybrid"])
@pytest.mark.parametrize("batching", ["padded", "ragged"])
def test_a_group_policy_is_honoured_round_by_round(monkeypatch, drafter, batching):
    """Each request verifies the group's d_b in every round (cut only by its room), drafts every
    block the group read of its chain, and the group saw that round's chain and gets its records."""
    traces = hand_traces(drafter)
    group, profiles = Planned(), hand_profiles()
    run = lockstep(traces, with_group(monkeypatch, "planned", group), profiles, SETTINGS, batching)
    assert run.group == "planned" and run.rounds == len(group.seen) == len(group.told)
    for b, (trace, history) in enumerate(zip(traces, run.records)):
        position = 0
        for r, record in enumerate(history):
            empty, seen = group.seen[r][b]
            cap = len(trace.output) - position - 1  # d drafts commit up to d + 1 tokens
            want = 0 if empty else min(Planned.plan(r, b), cap)
            assert record.chosen_length == want, (b, r)
            read = len(seen) // N
            assert record.blocks_drafted == (1 if empty else max(read, -(-Planned.plan(r, b) // N), 1)), (b, r)
            if b == 0 and not empty:  # the group read a second block of request 0's chain: it was drafted
                steps = list(trace.step_sources[position][:2]) + [s for k, s in trace.discarded[position] if k < 2]
                assert read == 2 and record.blocks_drafted == 2
                assert record.modeled_draft_s == pytest.approx(drafting_s(profiles[1], steps))  # and paid for
            assert np.array_equal(record.confidences[: len(seen)], seen)  # the chain it decided on
            assert group.told[r][b] is record
            position = record.cumulative_tokens
        assert all(told[b] is None for told in group.told[len(history) :])  # finished: no record
        assert [c[b] for c in group.seen[len(history) :]] == [None] * (run.rounds - len(history))
    # the requests' lengths differed within rounds
    assert any(len({h[r].chosen_length for h in run.records if r < len(h)}) > 1 for r in range(run.rounds))


def test_a_group_decision_out_of_bounds_is_refused(monkeypatch):
    class Wrong:
        name, d_max = "wrong", 3

        def __init__(self, lengths):
            self.lengths = lengths

        def choose_lengths(self, chains):
            return self.lengths(chains)

        def update(self, records):
            pass

        def reset(self):
            pass

    traces, P = hand_traces("lookup"), hand_profiles()
    for lengths, match in (
        (lambda chains: [1], "returned 1 lengths for 3"),
        (lambda chains: [4, 0, 0], "not within 0..3"),
        (lambda chains: [1 for c in chains], "offered nothing"),  # some anchor of these traces is empty
    ):
        with pytest.raises(ValueError, match=match):
            lockstep(traces, with_group(monkeypatch, "wrong", Wrong(lengths)), P, SETTINGS)


@pytest.mark.parametrize("drafter", ["dflash", "lookup", "hybrid"])
def test_every_request_commits_its_traces_text_in_lock_step(monkeypatch, drafter):
    """Greedy in lock-step, per request and group modes alike, padded and ragged: each request's
    committed tokens are its trace's text, token for token."""
    traces = hand_traces(drafter)
    modes = [
        "libraspec",
        "libraspec-priced",
        "static",
        "vllm-adaptive",
        "vllm-schedule",
        with_group(monkeypatch, "planned", Planned()),
    ]
    for mode in modes:
        for batching in ("padded", "ragged"):
            run = lockstep(traces, mode, check_profiles(), SETTINGS, batching)
            for trace, history in zip(traces, run.records):
                assert [t for r in history for t in r.committed_tokens] == list(trace.output), (mode, batching)
                assert history[-1].finished and not any(r.finished for r in history[:-1])
            assert run.tokens == sum(len(t.output) for t in traces)


def test_both_prices_never_fall_as_any_request_verifies_more():
    """Over a grid of group sizes 1..8 (measured 1, 2, 4, 8; the rest between) and lengths d_b = 0..5
    (every vector up to 3 requests, seeded random ones beyond), padded and ragged prices never fall
    when one request's d grows by one; ragged never exceeds padded, and equals it when all d_b agree."""
    rng = np.random.default_rng(0)
    for profiles in (check_profiles(), hand_profiles()):
        for size in range(1, 9):
            if size <= 3:
                grid = list(itertools.product(range(6), repeat=size))
            else:
                grid = [tuple(rng.integers(0, 6, size)) for _ in range(150)]
            for ds in grid:
                rows = [d + 1 for d in ds]
                prices = {b: forward_s(profiles, rows, b) for b in ("padded", "ragged")}
                assert prices["ragged"] <= prices["padded"] + 1e-15
                if len(set(rows)) == 1:
                    assert prices["ragged"] == pytest.approx(prices["padded"], rel=1e-12)
                for b in range(size):
                    more = rows[:b] + [rows[b] + 1] + rows[b + 1 :]
                    for batching, price in prices.items():
                        assert forward_s(profiles, more, batching) >= price - 1e-15, (size, ds, b, batching)


# -- vLLM's global budget over a group -----------------------------------------------------------------


def budget_profiles() -> dict[int, LatencyProfile]:
    """Batch 2 verifies k rows per request in 0.04 + 0.06 k s; a drafting step costs 0.05 s and the
    upkeep 0.01 s, so a round's fixed part (drafting + the forward's 0.04) is 0.1 s."""
    two = LatencyProfile.from_linear(0.04, 0.06, 0.05, N, max_tokens=14)
    two = dataclasses.replace(two, fit_s=0.01)
    return {1: two, 2: two}


def test_the_global_budget_admits_a_confident_requests_later_drafts_first():
    """A confident request (q 0.9: S = 0.9, 0.81, 0.729) and a doubtful one (q 0.5: S = 0.5, 0.25,
    0.125), d_max 3. Ragged, B slots cost 0.1 + 0.06 (2 + B) / 2 s: the rates (2 + sum of the B best
    S) / cost for B = 0..4 are 12.5, 15.26, 16.86, 17.756, 17.64, so B = 3: all three of the confident
    request's drafts, none of the doubtful's (its first, 0.5, ranks 4th). Padded the token-count
    table prices 2 + B tokens as the even spread's longest rows, ceil((2 + B) / 2), so B = 3 costs
    what B = 4 does: B = 4 (rate 17.64, against 15.85 at 3), the doubtful request's first draft too."""
    confident, doubtful = [0.9] * 3, [0.5] * 3
    ragged = GlobalBudget(Batch(budget_profiles(), 2, "ragged"), d_max=3)
    assert ragged.choose_lengths([Chain(confident), Chain(doubtful)]) == [3, 0] and ragged.budget == 3
    assert ragged.choose_lengths([Chain(doubtful), Chain(confident)]) == [0, 3]
    padded = GlobalBudget(Batch(budget_profiles(), 2, "padded"), d_max=3)
    assert padded.choose_lengths([Chain(confident), Chain(doubtful)]) == [3, 1] and padded.budget == 4
    # the round's drafting is the slowest request's: a diffusion pass of 0.5 s beside a free look-up
    # makes the fixed part 0.55 s, so more slots pay: B = 5 (rate 6.83), the doubtful request's 2 too
    slow = {B: dataclasses.replace(P, draft_s=(0.5,)) for B, P in budget_profiles().items()}
    group = GlobalBudget(Batch(slow, 2, "ragged"), d_max=3)
    assert group.choose_lengths([Chain(doubtful, source="lookup"), Chain(confident)]) == [2, 3]
    assert group.choose_lengths([Chain(doubtful, source="lookup"), Chain(confident, source="lookup")]) == [0, 3]
    # a finished request takes no part; a request with nothing drafted takes an AR step: R = 2 still
    assert ragged.choose_lengths([None, Chain(confident), Chain(doubtful, empty=True)])[0] == 0
    # where every verified row costs more than its survival can pay, the budget is 0: AR steps
    steep = {
        B: dataclasses.replace(P, verify_s=tuple(0.04 + 2.0 * k for k in range(1, 15)))
        for B, P in budget_profiles().items()
    }
    assert GlobalBudget(Batch(steep, 2, "ragged"), d_max=3).choose_lengths([Chain(confident), Chain(doubtful)]) == [
        0,
        0,
    ]


def test_the_global_budget_drafts_a_block_more_only_when_it_could_win():
    """Chains of 3 blocks whose first block is sure (q = 1): a further block could win, so the group
    drafts it, and then the next; a chain whose last drafted S is 0 never drafts more."""
    cheap = {
        B: dataclasses.replace(P, verify_s=tuple(0.04 + 0.001 * k for k in range(1, 15)))
        for B, P in budget_profiles().items()
    }
    group = GlobalBudget(Batch(cheap, 2, "ragged"), d_max=9)
    sure, dead = Chain([1.0] * 9), Chain([0.9, 0.0, 0.0] + [1.0] * 6)
    assert group.choose_lengths([sure, dead]) == [9, 1]
    assert sure.blocks == 3 and dead.blocks == 1


# -- LibraSpec priced over a group ---------------------------------------------------------------------


def test_priced_group_prices_the_groups_round_padded_and_ragged():
    """budget_profiles, the confident and the doubtful request, d_max 3 (one block each). V: the prior
    pseudo-round drafts a pass and the upkeep (0.06 s) and verifies 4 rows each (0.04 + 0.24 s) for
    2 x 2 tokens: 0.085 s a token. Padded a round pays its longest request: for K = 0..3 the nets
    V (sum of the admitted S) - (0.06 + 0.04 + 0.06 (K + 1)) are -0.16, -0.101, -0.0709, -0.05831, so
    K = 3 and the doubtful request's drafts ride along for nothing: [3, 3]. Ragged the forward costs
    0.04 + 0.06 N / 2 for N rows: over the best slots (0.9, 0.81, 0.729, 0.5, 0.25, 0.125) the nets
    for 0..6 slots are -0.16, -0.1135, -0.07465, -0.042685, -0.030185, -0.038935, -0.05831, so 4
    slots: the confident request's three and the doubtful's first, [3, 1]."""
    from libraspec.group import PricedGroup

    confident, doubtful = [0.9] * 3, [0.5] * 3
    padded = PricedGroup(Batch(budget_profiles(), 2, "padded"), d_max=3)
    assert padded.value_s() == pytest.approx(0.085)
    assert padded.choose_lengths([Chain(confident), Chain(doubtful)]) == [3, 3]
    ragged = PricedGroup(Batch(budget_profiles(), 2, "ragged"), d_max=3)
    assert ragged.choose_lengths([Chain(confident), Chain(doubtful)]) == [3, 1]
    assert ragged.choose_lengths([Chain(doubtful), Chain(confident)]) == [1, 3]
    assert ragged.choose_lengths([None, Chain(confident), Chain(doubtful, empty=True)]) == [0, 3, 0]
    # a row costs 2 s a request (V is then 2.025 s a token, the prior priced so): two doubtful requests
    # (q 0.3) cannot earn it, and the group takes AR steps
    steep = {
        B: dataclasses.replace(P, verify_s=tuple(0.04 + 2.0 * k for k in range(1, 15)))
        for B, P in budget_profiles().items()
    }
    for batching in ("padded", "ragged"):
        group = PricedGroup(Batch(steep, 2, batching), d_max=3)
        assert group.value_s() == pytest.approx((0.06 + 0.04 + 8.0) / 4)
        assert group.choose_lengths([Chain([0.3] * 3), Chain([0.3] * 3)]) == [0, 0]
    with pytest.raises(ValueError, match="prior_tau"):
        PricedGroup(Batch(budget_profiles(), 2), d_max=3, prior_tau=0.5)


def test_priced_group_drafts_a_block_more_only_when_it_could_win():
    """Two sure chains (q 0.99) of two blocks, d_max 6, padded: a second block for one request could
    win (its bounding slots admitted beside the other's three), so each drafts it, and both verify 6;
    with a drafting step of 2 s no further block can pay and both verify the first block's 3."""
    from libraspec.group import PricedGroup

    group = PricedGroup(Batch(budget_profiles(), 2, "padded"), d_max=6)
    a, b = Chain([0.99] * 6), Chain([0.99] * 6)
    assert group.choose_lengths([a, b]) == [6, 6] and a.blocks == b.blocks == 2
    slow = {B: dataclasses.replace(P, draft_s=(2.0,)) for B, P in budget_profiles().items()}
    group = PricedGroup(Batch(slow, 2, "padded"), d_max=6)
    a, b = Chain([0.99] * 6), Chain([0.99] * 6)
    assert group.choose_lengths([a, b]) == [3, 3] and a.blocks == b.blocks == 1


def test_priced_group_learns_v_from_the_rounds_as_lock_step_prices_them(monkeypatch):
    """After a lock-step run, the group's V is the replay's own modeled seconds plus the prior over
    its committed tokens plus the prior's: it priced every round as the replay charged it."""
    from libraspec.group import PricedGroup

    made = []
    real_init = PricedGroup.__init__

    def spy(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(PricedGroup, "__init__", spy)
    for batching in ("padded", "ragged"):
        made.clear()
        run = lockstep(hand_traces("dflash"), "libraspec-priced", hand_profiles(), SETTINGS, batching)
        (group,) = made
        assert run.group == "libraspec-priced"
        want = (group.prior_s + run.seconds) / (group.prior_tokens + run.tokens)
        assert group.value_s() == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("drafter", ["dflash", "lookup"])
def test_the_global_budget_of_one_request_is_vllm_adaptive_alone(drafter):
    """A group of one: the budget over the group is `VLLMAdaptivePolicy`'s rule at batch 1, round for
    round (its lengths and the blocks it drafted), and so costs what the mode's own replay costs."""
    from libraspec.analysis.replay import replay

    P = hand_profiles()
    for trace in hand_traces(drafter):
        alone = replay(trace, "vllm-adaptive", P[1], SETTINGS)
        group = lockstep([trace], "vllm-adaptive", {1: P[1]}, SETTINGS)
        assert group.group == "vllm-adaptive"
        assert [(r.chosen_length, r.blocks_drafted) for r in group.records[0]] == [
            (r.chosen_length, r.blocks_drafted) for r in alone
        ]
        assert group.seconds == pytest.approx(alone[-1].cumulative_modeled_s, rel=1e-12)
        assert any(r.blocks_drafted > 1 for r in alone) or drafter == "lookup"


def test_the_batch_schedule_in_lock_step_reads_the_requests_still_running(monkeypatch):
    """vllm-schedule's group form verifies K(B') in every round, B' the requests still running (three,
    then two, then one as the texts end), cut by each round's room; at batch 1 its per-request
    policy reads K(1)."""
    import libraspec.modes as modes
    from libraspec.serving.vllm import schedule_length

    ranges = [[1, 1, 5], [2, 2, 3], [3, 8, 2]]
    monkeypatch.setattr(modes, "load_schedule", lambda: {"ranges": ranges})
    traces = hand_traces("dflash")
    run = lockstep(traces, "vllm-schedule", hand_profiles(), SETTINGS)
    assert run.group == "vllm-schedule"
    seen = set()
    for r in range(max(len(h) for h in run.records)):
        live = [(trace, h[r]) for trace, h in zip(traces, run.records) if len(h) > r]
        K = schedule_length(ranges, len(live))
        seen.add(K)
        for trace, record in live:
            cap = trace.max_new_tokens - (record.start_position - len(trace.prompt)) - 1
            assert record.chosen_length == min(K, cap, SETTINGS.d_max), (r, len(live))
    assert seen == {2, 3, 5}  # every range was read as requests finished
    alone = lockstep(traces[:1], "vllm-schedule", hand_profiles(), SETTINGS)
    assert alone.records[0][0].chosen_length == 5


def test_lockstep_rows_price_both_ways():
    """grids.lockstep_rows passes its batching to lockstep (padded by default)."""
    from libraspec.experiments import grids

    traces, P = hand_traces("dflash"), hand_profiles()
    config = grids.Config("static d=5", "static", SETTINGS)
    for batching in ("padded", "ragged"):
        rows = grids.lockstep_rows([traces, traces[1:]], config, P, batching)
        assert [r["modeled_s"] for r in rows] == [
            lockstep(traces, "static", P, SETTINGS, batching).seconds,
            lockstep(traces[1:], "static", P, SETTINGS, batching).seconds,
        ]
    assert grids.lockstep_rows([traces], config, P) == grids.lockstep_rows([traces], config, P, "padded")


def test_online_q_in_lock_step_calibrates_each_request_from_its_own_rounds(monkeypatch):
    """`online_q`: a per-request mode runs under `OnlineCalibration`; a group sees every chain through
    its request's own calibration (a `CalibratedGroup`), fitted on that request's records only, and the
    round's buffer still drafts the raw chain."""
    from libraspec.group import CalibratedGroup
    from libraspec.serving.vllm import OnlineCalibration

    traces, P = [hand_trace(seed, 300) for seed in (1, 2, 3)], hand_profiles()  # enough pairs to refit
    seen = []
    real_init = CalibratedGroup.__init__

    def spy(self, group, requests):
        real_init(self, group, requests)
        seen.append(self)

    monkeypatch.setattr(CalibratedGroup, "__init__", spy)
    calibrated = lockstep(traces, "vllm-adaptive", P, SETTINGS, online_q=True)
    plain = lockstep(traces, "vllm-adaptive", P, SETTINGS)
    (group,) = seen
    assert len(group.calibrations) == 3 and calibrated.group == plain.group == "vllm-adaptive"
    for calibration, history in zip(group.calibrations, calibrated.records):
        want = OnlineCalibration(LibraListener())
        for record in history:
            want.update(record)
        assert calibration.snapshot() == want.snapshot()  # that request's pairs, no other's
    assert any(c.refits for c in group.calibrations)  # the calibration moved q, and so the decisions
    assert [len(h) for h in calibrated.records] != [
        len(h) for h in plain.records
    ] or calibrated.seconds != plain.seconds
    for trace, history in zip(traces, calibrated.records):  # still the trace's text
        assert [t for r in history for t in r.committed_tokens] == list(trace.output)
    alone = lockstep(traces, "libraspec", P, SETTINGS, online_q=True)
    assert alone.group == "" and alone.seconds != lockstep(traces, "libraspec", P, SETTINGS).seconds


class LibraListener:
    name, d_max = "listener", 1

    def update(self, record) -> None:
        pass

    def reset(self) -> None:
        pass


def test_a_paired_ratio_is_the_ratio_of_sums_with_a_paired_interval():
    """grids.paired_ratio: A's speed over B's on the same prompts, B's seconds per token over A's."""
    from libraspec.experiments import grids

    a = [{"tokens": 10, "modeled_s": 1.0}, {"tokens": 20, "modeled_s": 3.0}]
    b = [{"tokens": 10, "modeled_s": 2.0}, {"tokens": 20, "modeled_s": 3.0}]
    out = grids.paired_ratio(a, b)
    assert out["ratio"] == pytest.approx((5.0 / 30) / (4.0 / 30))
    low, high = out["interval"]
    assert 1.0 <= low <= out["ratio"] <= high <= 2.0  # each prompt's ratio is 2 or 1
    same = grids.paired_ratio(a, a)
    assert same["ratio"] == 1.0 and same["interval"] == [1.0, 1.0]
    with pytest.raises(ValueError, match="same prompts"):
        grids.paired_ratio(a, b[:1])


def test_the_engine_grid_holds_every_rule_once_with_and_without_online_q():
    from libraspec.experiments import grids
    from libraspec.modes import ENGINE, MODES, PAPER

    labels = [c.label for c in grids.engine_grid(N)]
    assert len(labels) == len(set(labels))
    for mode in [m for m in MODES if MODES[m].role == ENGINE] + ["libraspec-priced", "g4", "failfast"]:
        assert MODES[mode].label in labels
    assert f"{MODES[PAPER].label} alpha=2.2" in labels and f"{MODES[PAPER].label} alpha=2.2 + online q" in labels
    assert "vLLM adaptive + online q" in labels and "LibraSpec priced + online q" in labels
    assert all(c.mode not in ("ar", "oracle") and not c.alpha_auto for c in grids.engine_grid(N))
    assert {f"static d={d}" for d in range(1, 2 * N + 1)} <= set(labels)
