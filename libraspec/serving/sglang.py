"""SGLang's adaptive speculative steps (`--speculative-adaptive`) as a length policy.

Source: SGLang, docs/advanced_features/adaptive_speculative_decoding.md (sections "How the policy
decides" and "Config file reference", commit 369fa46) and the class behind it,
python/sglang/srt/speculative/adaptive_spec_params.py (`AdaptiveSpeculativeParams`, the EMA
policy; in later versions `AdaptiveStepSlot`). After every verify batch SGLang averages the
accepted drafts per request, smooths the average with an exponential moving average

    ema <- (1 - EMA_ALPHA) * ema + EMA_ALPHA * accepted,        ema_0 = steps_0 - 1,

and, once WARMUP_BATCHES batches are past and then every UPDATE_INTERVAL batches, moves the step
count among fixed tiers: down a tier at a time while ema <= (the tier below) - 0.5 + DOWN_HYSTERESIS,
or, when it did not move down, up a tier at a time while ema > (its tier) - 0.5 + UP_HYSTERESIS
(one recomputation may cross several tiers). With the default hysteresis tier t
holds while ema lies in (t_below - 0.75, t - 0.5]: the doc's target_steps ~ clamp(round(ema) + 1)
among the tiers, where coming down from t to t_below takes ema a quarter token lower than going up.
The policy verifies d = the current tier's step count (EAGLE with topk 1 drafts one token per step).

Simplified or mapped here:
- the tiers are capped at d_max (the only knob of the mode); a tier above d_max becomes d_max;
- batch 1: the batch average is this request's `record.accepted`; a round that verified no draft
  (the drafter had nothing, an AR step) is no verify batch and leaves the state alone, as G4 does;
- the first step count is INITIAL_STEPS = 3, the doc's launch example (`--speculative-num-steps 3`)
  and the middle tier that later versions fall back to, snapped to the nearest capped tier;
- later SGLang versions (e.g. commit 015c872) route per batch size with other tiers at batch 1
  ([1, 3, 5, 7]), a zero-step tier for large batches and an optional EMA ceiling; this follows the
  documented defaults above. The switch between pre-built CUDA-graph states is SGLang's engineering
  and has no counterpart here.
The decision reads no confidence at all: only earlier rounds' records.
"""

from __future__ import annotations

from libraspec.checks import check_buffer, check_int
from libraspec.policy import Decision, DraftBufferLike, ensure_drafted
from libraspec.records import RoundRecord

# the source's defaults (the doc's "Config file reference")
TIERS = (1, 3, 7)  # candidate_steps
EMA_ALPHA = 0.2  # ema_alpha
UPDATE_INTERVAL = 5  # update_interval: verify batches between recomputations, after warm-up
WARMUP_BATCHES = 10  # warmup_batches: verify batches observed before the first switch
DOWN_HYSTERESIS = -0.25  # down_hysteresis: extra margin before a smaller step count
UP_HYSTERESIS = 0.0  # up_hysteresis: extra margin before a larger step count
INITIAL_STEPS = 3  # the doc's `--speculative-num-steps 3`, snapped to the nearest tier


def next_tier(
    tiers: tuple[int, ...], current: int, ema: float, down: float = DOWN_HYSTERESIS, up: float = UP_HYSTERESIS
) -> int:
    """The tier SGLang's recomputation moves to from `current` at this EMA: down one tier while
    ema <= lower - 0.5 + down, and only if it did not move down, up one tier while ema > tier - 0.5 + up."""
    k = tiers.index(current)
    start = k
    while k > 0 and ema <= tiers[k - 1] - 0.5 + down:
        k -= 1
    if k == start:
        while k < len(tiers) - 1 and ema > tiers[k] - 0.5 + up:
            k += 1
    return tiers[k]


class SGLangAdaptivePolicy:
    """SGLang's EMA over accepted lengths picking d from fixed tiers (module docstring)."""

    name = "sglang-adaptive"

    def __init__(
        self,
        d_max: int,
        tiers: tuple[int, ...] = TIERS,
        initial: int = INITIAL_STEPS,
        ema_alpha: float = EMA_ALPHA,
        warmup: int = WARMUP_BATCHES,
        interval: int = UPDATE_INTERVAL,
        down: float = DOWN_HYSTERESIS,
        up: float = UP_HYSTERESIS,
    ):
        self.d_max = check_int(d_max, "d_max")
        if not tiers:
            raise ValueError("SGLang's adaptive policy needs at least one tier")
        self.tiers = tuple(sorted({min(check_int(t, "tier"), self.d_max) for t in tiers}))
        if not 0.0 < ema_alpha <= 1.0:
            raise ValueError(f"ema_alpha must be within (0, 1], got {ema_alpha!r}")
        self.ema_alpha, self.down, self.up = float(ema_alpha), float(down), float(up)
        self.warmup = check_int(warmup, "warm-up batches", low=0)
        self.interval = check_int(interval, "update interval")
        self.initial = min(self.tiers, key=lambda t: (abs(t - initial), t))  # snapped; a tie goes down
        self.reset()

    def choose_length(self, buffer: DraftBufferLike) -> Decision:
        check_buffer(buffer)
        ensure_drafted(buffer, self.steps)
        return Decision(self.steps)

    def update(self, record: RoundRecord) -> None:
        if record.chosen_length == 0:  # an AR step: no draft was verified
            return
        self.ema = (1.0 - self.ema_alpha) * self.ema + self.ema_alpha * record.accepted
        self.batches += 1
        if self.batches > self.warmup and (self.batches - self.warmup) % self.interval == 0:
            self.steps = next_tier(self.tiers, self.steps, self.ema, self.down, self.up)

    def reset(self) -> None:
        self.steps = self.initial
        self.ema = float(self.initial - 1)  # SGLang's neutral start: steps - 1
        self.batches = 0

    def snapshot(self) -> tuple:
        """The state carried across rounds (hashable): step count, EMA, batches seen."""
        return (self.steps, self.ema, self.batches)

    def restore(self, snapshot: tuple) -> None:
        self.steps, self.ema, self.batches = snapshot
