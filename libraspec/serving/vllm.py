"""vLLM's length rules as policies of this project: adaptive verification, the batch-size schedule
and the online acceptance calibration (docs/ARCHITECTURE.md, "The engines' rules").

Sources, read for their arithmetic and defaults (nothing copied):

- Adaptive verification, Model Runner v2 (vLLM PR #47808):
  `vllm/v1/worker/gpu/spec_decode/adaptive_verification.py`, `AdaptiveVerificationManager.get_num_tokens`
  (the budget) and `_assign_draft_token_budget` (which slots it admits). For requests b = 1..R with
  drafter confidences q_{b,j}, each draft slot (b, k) scores its survival S_{b,k} = prod_{j<=k} q_{b,j};
  the slots are ranked over the whole batch, and with s_1 >= s_2 >= ... the ranked scores,

      B* = argmax_{B = 0..B_max} (R + sum_{i<=B} s_i) / (draft_cost[R] + verify_cost[R + B]),

  the first B on ties (numpy's argmax); the B* best slots are admitted, which is a prefix of every
  request because S never rises along a request. R is the requests that sample a token this step
  (one row each that is not a draft), R + B the rows verified; B_max is the slots scheduled, cut to
  the sampler's logit budget. A confident request's 5th draft can so outrank a doubtful one's 1st.
- Online acceptance calibration (vLLM PR #52228): `vllm/v1/worker/gpu/spec_decode/acceptance_estimator.py`,
  `OnlineAcceptanceEstimator`: a logistic on the log-odds of the drafter's top probability,
  p = sigmoid(w * logit(max q) + b_k), fitted by Newton-IRLS on the accepted / rejected drafts
  actually verified (observed up to the first rejection, never past it), refit every
  `REFIT_INTERVAL` = 100 engine steps with a ridge `L2` = 1e-3, a negative slope refused.
- Batch-size schedule (vLLM PR #32374, `num_speculative_tokens_per_batch_size`;
  `vllm/v1/spec_decode/dynamic/utils.py`, `build_dynamic_sd_schedule_lookup`): entries
  [bs_lo, bs_hi, K], inclusive, non-overlapping, the first starting at batch 1; a batch size in a
  gap takes the K of the range before it, one beyond the last range the last K, and K is clamped to
  the run's cap (their num_speculative_tokens, our d_max). One K for the whole batch.

What is simplified here is said at each function. Every rule decides from the chain's q_i
(`buffer.confidences`) and earlier rounds' records only, so sampling stays lossless
(docs/ARCHITECTURE.md, "Lossless verification").
"""

from __future__ import annotations

import copy
import functools
import json
import math
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..checks import check_buffer, check_confidences, check_int
from ..cost import DIFFUSION, EAGLE, LatencyProfile, drafting_s, upkeep_s
from ..paths import ASSETS
from ..policy import Decision, DraftBufferLike, SourcedBufferLike, StaticPolicy
from ..records import RoundRecord

SCHEDULE_PATH = ASSETS / "batch_schedule.json"  # the schedule's table: chosen by benchmarks/batch_schedule.py
SCHEDULE_KEYS = ("ranges", "chosen_on", "how")  # what the table's file must say
REFIT_INTERVAL = 100  # vLLM's OnlineAcceptanceEstimator.REFIT_INTERVAL (engine steps there; observed pairs here)
RIDGE = 1e-3  # vLLM's OnlineAcceptanceEstimator.L2, the ridge of the Newton solve
NEWTON_STEPS = 8  # Newton-IRLS steps per refit at most (vLLM takes one per refit window)
Q_CLIP = 1e-9  # q within [Q_CLIP, 1 - Q_CLIP] before the log-odds (the endpoints map to themselves)


# ---- adaptive verification: the global draft budget ------------------------------------------------


def survival(q) -> np.ndarray:
    """S_k = prod_{j<=k} q_j for k = 1..len(q), in float64 (as vLLM takes the cumulative product)."""
    return np.cumprod(np.asarray(q, dtype=np.float64))


def _checked_survival(s, request: int) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"survivals[{request}] must be a 1-D array S_1..S_K, got shape {s.shape}")
    if s.size and not (np.all(np.isfinite(s)) and s.min() >= 0.0 and s.max() <= 1.0):
        raise ValueError(f"survivals[{request}] must be finite and within [0, 1]")
    if s.size > 1 and np.any(np.diff(s) > 0.0):
        raise ValueError(f"survivals[{request}] must be non-increasing (S_k = prod_(j<=k) q_j), got {s.tolist()}")
    return s


def global_budget(
    survivals: Sequence,
    draft_cost: Callable[[int], float],
    verify_cost: Callable[[int], float],
    max_slots: int | None = None,
) -> tuple[int, list[int]]:
    """(B, [d_b]): vLLM's draft budget over a batch and each request's admitted length (module
    docstring, adaptive verification).

    survivals[b] holds request b's S_1..S_K (non-increasing; empty: the request offers no draft);
    draft_cost(R) and verify_cost(tokens) are seconds, tokens = R + B the rows verified over the
    batch (each request's last committed token and its admitted drafts). B maximises
    (R + sum of the B best survivals) / (draft_cost(R) + verify_cost(R + B)) over B = 0..B_max, the
    first B on ties; B_max is every slot offered, cut to `max_slots`. B = 0 makes every request an
    AR step. The B best slots are admitted, ties broken by the shallower slot, then the earlier
    request, so each request's admitted slots are a prefix of its drafts (d_b of them).

    Simplified against vLLM: the costs are callables, used as given (vLLM builds tables from curves
    profiled at start-up, made non-decreasing, below the CUDA-graph limit padded up to the next
    captured size); every request samples (no chunked prefill among them) and has one row that is
    not a draft (no bonus tokens beyond one); the budget and the admitted slots read the same q
    (vLLM sizes the budget from the previous step's copy of the confidences, then ranks the current
    ones on the GPU, where torch's top-k breaks ties as it may).
    """
    R = len(survivals)
    if R == 0:
        raise ValueError("a draft budget needs at least one request")
    scores, owner = ranked_slots(survivals)
    top = scores.size if max_slots is None else min(scores.size, check_int(max_slots, "max_slots", low=0))
    gains = R + np.concatenate(([0.0], np.cumsum(scores[:top])))  # (top + 1,) expected tokens at B
    fixed = float(draft_cost(R))
    costs = np.array([fixed + float(verify_cost(R + b)) for b in range(top + 1)])  # (top + 1,) seconds at B
    if not (np.all(np.isfinite(costs)) and costs.min() > 0.0):
        raise ValueError(f"draft_cost + verify_cost must be finite seconds > 0, got {costs.tolist()}")
    B = int(np.argmax(gains / costs))  # the first of equal rates, as numpy's argmax in vLLM
    lengths = np.bincount(owner[:B], minlength=R)  # (R,)
    return B, [int(d) for d in lengths]


def ranked_slots(survivals: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """(scores, owners): every draft slot the requests offer, best survival first, ties broken by the
    shallower slot, then the earlier request, so the first B slots admit a prefix of each request's
    drafts; owners[j] is the request of the j-th best slot (`np.bincount(owners[:B])` its length)."""
    rows = [_checked_survival(s, b) for b, s in enumerate(survivals)]
    scores = np.concatenate([s for s in rows]) if any(s.size for s in rows) else np.zeros(0)  # (slots,)
    depth = np.concatenate([np.arange(s.size) for s in rows]).astype(np.int64)  # slot k - 1 of its request
    owner = np.concatenate([np.full(s.size, b) for b, s in enumerate(rows)]).astype(np.int64)
    order = np.lexsort((owner, depth, -scores))  # best survival first; ties: shallower, then earlier request
    return scores[order], owner[order]


def _steps(buffer: SourcedBufferLike, blocks: int) -> list[str]:
    """The drafting steps `blocks` blocks of this round run, as `DraftBuffer.steps_run` lists them:
    the buffer's own sources for the steps it drafted, its last source repeating beyond (a
    `cost.Drafting` the same way), block diffusion before any step."""
    kept = list(buffer.step_sources) or [DIFFUSION]
    steps = [kept[min(b, len(kept) - 1)] for b in range(blocks)]
    return steps + [source for step, source in buffer.discarded if step < blocks]


class VLLMAdaptivePolicy:
    """vLLM's adaptive verification for one request (mode vllm-adaptive; module docstring).

    With R = 1 the global budget is d = argmax_{d = 0..d_max} (1 + sum_{k<=d} S_k) / T(d), and T(d)
    is this project's price of the round (`cost.chain_round_s`, one price list): the drafting of the
    blocks drafted (`cost.drafting_s`, each step by its source) and the drafter's upkeep as vLLM's
    draft_cost[1], the verification of d + 1 rows after the round's context (`verify_time`) as its
    verify_cost. vLLM drafts K tokens before it budgets; here the buffer holds one block when the
    round starts and the rule drafts a block more only while some d beyond the drafted ones could
    still win: with every later S_k at most the last drafted S (S never rises), the bound
    (1 + sum S + (d - drafted) S_last) / T(d), T(d) with the blocks d needs, must beat the best
    drafted rate. So d is the exact argmax over 0..d_max given the q_i, and a block is drafted only
    when it could pay for itself. A drafted block is sunk: it prices every d of the round.

    The context a round starts after and whether the drafter's upkeep applies are read from the
    previous round's record (its start and committed tokens; its modeled seconds less its drafting
    and verification): the first round is priced after the profile's c0 and pays the upkeep when
    it drafts by block diffusion. `needs_features` fixes the upkeep instead.
    """

    name = "vllm-adaptive"

    def __init__(self, profile: LatencyProfile, d_max: int, needs_features: bool | None = None):
        if not isinstance(profile, LatencyProfile):
            raise ValueError("vLLM's adaptive verification prices its budget with a LatencyProfile")
        self.profile = profile
        self.d_max = check_int(d_max, "d_max")
        self.needs_features = needs_features
        self._context: int | None = None  # committed tokens the next round starts after (None: c0)
        self._upkeep: bool | None = needs_features  # learned from the records when not given

    def round_s(self, buffer: SourcedBufferLike, blocks: int, d: int) -> float:
        """T(d): the round's modeled seconds with `blocks` blocks drafted and d drafts verified
        (what `cost.chain_round_s` prices the round at)."""
        return self._fixed_s(buffer, blocks) + self.profile.verify_time(d + 1, self._context)

    def _fixed_s(self, buffer: SourcedBufferLike, blocks: int) -> float:
        """vLLM's draft_cost[1]: the drafting of `blocks` blocks and the drafter's upkeep."""
        steps = _steps(buffer, blocks)
        return drafting_s(self.profile, steps) + upkeep_s(self.profile, self._pays_upkeep(buffer), steps)

    def choose_length(self, buffer: SourcedBufferLike) -> Decision:
        n, _ = check_buffer(buffer)
        while True:
            q = check_confidences(buffer.confidences)
            blocks, drafted = len(q) // n, min(len(q), self.d_max)
            S = survival(q[:drafted])  # (drafted,) S_1..S_drafted
            fixed = self._fixed_s(buffer, blocks)
            d = global_budget([S], lambda R: fixed, lambda rows: self.profile.verify_time(rows, self._context))[0]
            if drafted >= self.d_max or not self._further_could_win(buffer, S, d, blocks):
                return Decision(d)
            buffer.extend(1)  # a d beyond the drafted blocks could still win: draft one more

    def _further_could_win(self, buffer, S: np.ndarray, d: int, blocks: int) -> bool:
        """Whether some d' in drafted + 1..d_max could beat d with every later S_k = S_last (a bound:
        S never rises), priced with the blocks d' needs."""
        if S[-1] <= 0.0:
            return False
        best = (1.0 + S[:d].sum()) / self.round_s(buffer, blocks, d)
        total, n = S.sum(), int(buffer.n)
        for more in range(len(S) + 1, self.d_max + 1):
            gain = 1.0 + total + (more - len(S)) * S[-1]
            if gain / self.round_s(buffer, max(blocks, -(-more // n)), more) > best:
                return True
        return False

    def _pays_upkeep(self, buffer: SourcedBufferLike) -> bool:
        if EAGLE in buffer.step_sources:
            return True  # the head's context always takes the round's tokens
        if self._upkeep is not None:
            return self._upkeep
        return not buffer.step_sources or DIFFUSION in buffer.step_sources  # a first guess

    def update(self, record: RoundRecord) -> None:
        """The next round's context, and (unless given) whether rounds pay the drafter's upkeep."""
        self._context = int(record.start_position) + len(record.committed_tokens)
        if self.needs_features is None and record.blocks_drafted and not record.tree_size:
            verify = self.profile.verify_time(record.chosen_length + 1, record.start_position)
            rest = record.modeled_s - record.modeled_draft_s - verify  # the upkeep, or 0
            if math.isfinite(rest) and self.profile.fit_s > 0.0:
                self._upkeep = abs(rest - self.profile.fit_s) < abs(rest)

    def reset(self) -> None:
        self._context, self._upkeep = None, self.needs_features


# ---- the batch-size schedule ------------------------------------------------------------------------


class ScheduleError(ValueError):
    """A batch-size schedule (its file or its ranges) that cannot be read as vLLM reads one."""


def checked_ranges(ranges, where: str = "the schedule") -> tuple[tuple[int, int, int], ...]:
    """[[bs_lo, bs_hi, K], ...] checked as vLLM checks a schedule (module docstring), sorted by bs_lo.
    Only vLLM's 3-item form: its 5-item form with a context range is not read."""
    if not isinstance(ranges, (list, tuple)) or not ranges:
        raise ScheduleError(f"{where}: 'ranges' must be a non-empty list of [bs_lo, bs_hi, K], got {ranges!r}")
    out = []
    for entry in ranges:
        if (
            not isinstance(entry, (list, tuple))
            or len(entry) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in entry)
        ):
            raise ScheduleError(f"{where}: each range must be three integers [bs_lo, bs_hi, K], got {entry!r}")
        lo, hi, k = entry
        if lo < 1 or hi < lo:
            raise ScheduleError(f"{where}: batch sizes need 1 <= bs_lo <= bs_hi, got [{lo}, {hi}, {k}]")
        if k < 0:
            raise ScheduleError(f"{where}: K must be >= 0 (0: no drafts verified), got [{lo}, {hi}, {k}]")
        out.append((lo, hi, k))
    out.sort()
    if out[0][0] != 1:
        raise ScheduleError(f"{where}: the first range must start at batch size 1, got {list(out[0])}")
    for (_, hi, _), (lo, _, _) in zip(out, out[1:]):
        if lo <= hi:
            raise ScheduleError(f"{where}: batch-size ranges overlap ({hi} and {lo})")
    return tuple(out)


def schedule_length(ranges, batch_size: int) -> int:
    """K at `batch_size`: its range's, in a gap the range's before it, beyond the last the last."""
    batch_size = check_int(batch_size, "batch size")
    k = None
    for lo, hi, value in checked_ranges(ranges):
        if lo > batch_size:
            break
        k = value
    return int(k)


def load_schedule(path: str | Path = SCHEDULE_PATH) -> dict:
    """The schedule's table from its JSON file ({"ranges", "chosen_on", "how"}, other keys kept),
    checked; a missing or damaged file raises ScheduleError saying how to make it again."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScheduleError(f"{path}: the batch-size schedule is missing; {_AGAIN}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ScheduleError(f"{path}: not a readable schedule ({err}); {_AGAIN}") from None
    return copy.deepcopy(_parse_schedule(str(path), text))


_AGAIN = "write it again with `python benchmarks/batch_schedule.py`"


@functools.lru_cache(maxsize=4)
def _parse_schedule(path: str, text: str) -> dict:
    """The checked table of one file's text (parsed once per text: a policy is made every run)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ScheduleError(f"{path}: not a readable JSON schedule ({err}); {_AGAIN}") from None
    if not isinstance(data, dict) or any(key not in data for key in SCHEDULE_KEYS):
        raise ScheduleError(f"{path}: a schedule is an object with {', '.join(SCHEDULE_KEYS)}; {_AGAIN}")
    if not all(isinstance(data[key], str) and data[key].strip() for key in SCHEDULE_KEYS[1:]):
        raise ScheduleError(f"{path}: 'chosen_on' and 'how' must say, in words, where the table comes from")
    data["ranges"] = [list(r) for r in checked_ranges(data["ranges"], path)]
    return data


class BatchSchedulePolicy(StaticPolicy):
    """vLLM's batch-size schedule (mode vllm-schedule; module docstring): d = min(K(batch size), d_max)
    every round, K looked up in `table` (a schedule dict, as `load_schedule` returns, or its ranges).
    At batch 1 it is the static length K(1); a lock-step replay builds it with its group's size.
    K = 0 makes every round an AR step, which here still drafts the round's first block (vLLM
    drafts nothing then)."""

    name = "vllm-schedule"

    def __init__(self, table, batch_size: int = 1, d_max: int = 24):
        ranges = table.get("ranges") if isinstance(table, dict) else table
        self.ranges = checked_ranges(ranges)
        self.batch_size = check_int(batch_size, "batch size")
        self.d_max = check_int(d_max, "d_max")
        self.length = min(schedule_length(self.ranges, self.batch_size), self.d_max)  # a static length


# ---- online acceptance calibration ------------------------------------------------------------------


def _logit(q: np.ndarray) -> np.ndarray:
    q = np.clip(q, Q_CLIP, 1.0 - Q_CLIP)
    return np.log(q) - np.log1p(-q)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # stable for large |z|


def fit_logistic(
    x: np.ndarray, y: np.ndarray, start=(1.0, 0.0), ridge: float = RIDGE, steps: int = NEWTON_STEPS
) -> tuple[float, float]:
    """(a, b) of P(y = 1) = sigmoid(a x + b) by Newton-IRLS from `start`, penalised by
    ridge / 2 * |(a, b) - start|^2, at most `steps` steps. x (N,), y (N,) in {0, 1}.

    Where x hardly varies (its weighted variance below 1e-8: a drafter whose q takes one value)
    the slope is not identified and only the intercept moves, conditioned on the slope, as vLLM
    updates an intercept whose position cannot fit its own slope."""
    theta = np.asarray(start, dtype=np.float64)  # (2,)
    anchor = theta.copy()
    X = np.stack([x, np.ones_like(x)], axis=1)  # (N, 2): the design row [x, 1]
    for _ in range(steps):
        p = _sigmoid(X @ theta)  # (N,)
        w = p * (1.0 - p)
        grad = X.T @ (y - p) - ridge * (theta - anchor)  # (2,)
        data = (X * w[:, None]).T @ X  # (2, 2): [[sum w x x, sum w x], [sum w x, sum w]]
        c = data[1, 1]  # sum w: 0 where every p saturated
        spread = (data[0, 0] * c - data[0, 1] ** 2) / c**2 if c > 1e-12 else 0.0  # Var_w(x)
        info = data + ridge * np.eye(2)
        if spread < 1e-8:
            step = np.array([0.0, grad[1] / info[1, 1]])
        else:
            step = np.linalg.solve(info, grad)
        theta = theta + step
        if np.max(np.abs(step)) < 1e-10:
            break
    return float(theta[0]), float(theta[1])


class CalibratedView:
    """The round's buffer as a policy sees it through `OnlineCalibration`: n, the mapped confidences,
    `extend` (which drafts on the real buffer), and the buffer's own drafting steps."""

    def __init__(self, buffer, mapping: Callable[[np.ndarray], np.ndarray]):
        self.buffer, self.mapping = buffer, mapping
        self.n = buffer.n

    @property
    def confidences(self) -> np.ndarray:
        return self.mapping(np.asarray(self.buffer.confidences, dtype=np.float64))  # (drafted,)

    def extend(self, num_blocks: int) -> None:
        self.buffer.extend(num_blocks)

    # the rest is the buffer's own: what a priced rule (`policy.SourcedBufferLike`) and a lock-step
    # group (`group.ChainLike`) read besides the confidences
    @property
    def step_sources(self) -> Sequence[str]:
        return self.buffer.step_sources

    @property
    def discarded(self) -> Sequence[tuple[int, str]]:
        return self.buffer.discarded

    @property
    def empty(self) -> bool:
        return self.buffer.empty

    @property
    def blocks(self) -> int:
        return self.buffer.blocks

    def steps_run(self, steps: int) -> list[str]:
        return self.buffer.steps_run(steps)


class OnlineCalibration:
    """Any chain policy that reads `buffer.confidences`, handed q_i mapped by vLLM's online
    calibration (module docstring): q -> sigmoid(a * logit(q) + b), the identity (a, b) = (1, 0)
    until the first refit. The pairs are (q_i, accepted?) of earlier rounds' verified drafts: draft
    i of a round that verified d and accepted a is observed for i <= min(a + 1, d) (vLLM's mask:
    the chain reached it and it was verified), accepted iff i <= a. Every `refit_every` observed
    pairs the fit is redone on every pair so far by `fit_logistic`; a fit whose slope is not
    positive is refused (vLLM keeps its coefficients when a slope turns negative), so q = 0 and
    q = 1 keep mapping to themselves.

    Simplified against vLLM: one slope and one intercept for every draft position (vLLM pools the
    slope and fits an intercept per position); the refit interval counts observed pairs (vLLM
    counts engine steps, each carrying the whole batch's graded drafts); each refit iterates Newton
    on every pair so far (vLLM takes one Newton step on the window since its last refit, gated at
    50 observations); no warm-up with full verification (vLLM verifies whole blocks for its first 3
    refits so that its labels are not censored by its own trimming); the start is the identity
    (vLLM's: slope 0, intercept 1.5). `reset()` forgets the pairs unless `persist` (vLLM's
    estimator lives across requests). The decision reads the chain's q and earlier records only.
    Records keep the raw q_i (what `update` reads); where the round's room cuts d, the engine
    recomputes a LibraSpec decision's eps_i over the raw q_i, not the mapped ones it chose from.
    """

    def __init__(self, policy, refit_every: int = REFIT_INTERVAL, ridge: float = RIDGE, persist: bool = False) -> None:
        self.policy = policy
        self.name = policy.name  # the same mode, its q_i calibrated
        self.refit_every = check_int(refit_every, "refit interval")
        if not (math.isfinite(ridge) and ridge > 0.0):
            raise ValueError(f"ridge must be a finite number > 0, got {ridge!r}")
        self.ridge, self.persist = float(ridge), bool(persist)
        self._forget()

    def _forget(self) -> None:
        self.coef = (1.0, 0.0)  # (a, b): the identity
        self.refits = 0
        self._q: list[float] = []  # q_i of every observed pair
        self._x: list[float] = []  # logit(q_i)
        self._y: list[float] = []  # 1.0 accepted, 0.0 rejected
        self._since = 0  # pairs observed since the last refit

    @property
    def d_max(self) -> int:
        return self.policy.d_max

    def calibrate(self, q) -> np.ndarray:
        """sigmoid(a * logit(q) + b), elementwise; q = 0 and 1 map to themselves (a > 0)."""
        q = np.asarray(q, dtype=np.float64)
        if self.refits == 0:
            return q.copy()
        a, b = self.coef
        out = _sigmoid(a * _logit(q) + b)
        out[q <= 0.0], out[q >= 1.0] = 0.0, 1.0
        return out

    def choose_length(self, buffer: DraftBufferLike) -> Decision:
        return self.policy.choose_length(CalibratedView(buffer, self.calibrate))

    def observe(self, q, accepted) -> None:
        """Add (q_i, accepted?) pairs, refitting each time `refit_every` more have come in."""
        q = np.asarray(q, dtype=np.float64).reshape(-1)
        y = np.asarray(accepted, dtype=np.float64).reshape(-1)
        if q.shape != y.shape:
            raise ValueError(f"one accepted? per q, got {q.size} q and {y.size} labels")
        for q_i, x_i, y_i in zip(q.tolist(), _logit(q).tolist(), y.tolist()):
            self._q.append(q_i)
            self._x.append(x_i)
            self._y.append(1.0 if y_i else 0.0)
            self._since += 1
            if self._since >= self.refit_every:
                self._refit()

    def _refit(self) -> None:
        self._since = 0
        a, b = fit_logistic(np.asarray(self._x), np.asarray(self._y), self.coef, self.ridge)
        if math.isfinite(a) and math.isfinite(b) and a > 0.0:
            self.coef, self.refits = (a, b), self.refits + 1

    def update(self, record: RoundRecord) -> None:
        d, a = int(record.chosen_length), int(record.accepted)
        seen = min(a + 1, d, len(record.confidences))
        if seen > 0 and not record.tree_size:
            self.observe(record.confidences[:seen], [i < a for i in range(seen)])
        self.policy.update(record)

    def reset(self) -> None:
        self.policy.reset()
        if not self.persist:
            self._forget()

    def snapshot(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The pairs observed so far, (q_i...), (accepted?...): all the calibration's state."""
        return tuple(self._q), tuple(self._y)

    def restore(self, state) -> None:
        """The calibration a run that observed `state`'s pairs (a `snapshot`) would have, refits included."""
        self._forget()
        self.observe(*state)
