"""transformers' assistant confidence threshold, re-fitted from an ROC, as a length policy.

Source: transformers 5.23.0 (this project's pinned version), generation/candidate_generator.py,
`AssistedCandidateGenerator` (`_generate_candidates`, `update_candidate_strategy`), with
generation/stopping_criteria.py's `ConfidenceCriteria` and the defaults of
generation/configuration_utils.py. The assistant drafts at most `num_assistant_tokens` tokens and
stops after the first one whose probability is below `assistant_confidence_threshold` (that token
is still a candidate): here

    d = min(first i with q_i < threshold, NUM_ASSISTANT_TOKENS, d_max).

After each round it keeps (q, matched) pairs: q of every accepted draft with matched = 1, then the
first rejected draft with matched = 0 (drafts after it are dropped); once it holds more than 5
pairs, both kinds among them, it sets the threshold to the one of sklearn's `roc_curve(matched, q)`
that minimises fpr + 3 fnr (`np.argmin`: the first, that is the highest, among equal costs). A
draft "matched" when it was verified (i <= record.chosen_length) and accepted (i <= record.accepted).
Here a pair is kept only from rounds that verified drafts.

Defaults (configuration_utils.py): num_assistant_tokens 20, num_assistant_tokens_schedule
"constant", assistant_confidence_threshold 0.4. Under the "heuristic" schedule (this project's G4)
num_assistant_tokens also grows by 2 after a round whose drafts were all accepted and shrinks by 1
(at least 1) otherwise, with no upper bound in transformers, and the threshold still stops drafting
within that cap: both act at once. `schedule="heuristic"` does that here (the count capped at d_max
where it is used); the mode keeps the source's default, "constant".

Simplified or mapped here:
- q_i is the drafter's probability of its chain token (`buffer.confidences`), where transformers
  reads the probability of the token the assistant generated (the same when it drafts greedily);
- the ROC is computed with numpy as sklearn computes it (distinct scores, collinear points dropped,
  an infinite threshold first); sklearn is optional in transformers and absent from this project's
  environment, where transformers itself therefore never re-fits;
- transformers stops collecting pairs and re-fitting for good once a re-fit lands on a threshold of
  0 (its guards test the threshold's truth value); this keeps re-fitting;
- reset() starts a run as a new `generate()` call starts its candidate generator (threshold 0.4, no
  pairs: the re-fitted threshold lives in the generator's copy of the config); under "heuristic"
  transformers carries num_assistant_tokens into the next call, which reset() does not (that is its
  "heuristic_transient");
- the draft length's room (max_length) is the engine's; universal assisted generation is not modelled;
- q is read at DIGITS (9) decimals, both where pairs are kept and where drafting stops: a drafter whose
  q_i are equal in meaning gives values 1e-16 apart that differ between CPUs (summation order in the
  softmax), and the re-fitted threshold is one of those q, so at full precision whether drafting stops
  at the threshold would be decided by float noise (transformers compares float32 probabilities and
  meets the same tie).
"""

from __future__ import annotations

import numpy as np

from libraspec.checks import check_buffer, check_confidences, check_int
from libraspec.policy import Decision, DraftBufferLike
from libraspec.records import RoundRecord

# the source's defaults
INITIAL_THRESHOLD = 0.4  # assistant_confidence_threshold
NUM_ASSISTANT_TOKENS = 20  # num_assistant_tokens
SCHEDULE = "constant"  # num_assistant_tokens_schedule
FN_WEIGHT = 3.0  # the re-fit's cost fpr + 3 fnr ("25% to false positives and 75% to false negatives")
MIN_PAIRS = 6  # a re-fit needs more than 5 pairs, at least one of each kind
DIGITS = 9  # q is read at 9 decimals (module docstring): differences below are float noise
SCHEDULES = ("constant", "heuristic")


def roc_threshold(confidences, matched, fn_weight: float = FN_WEIGHT) -> float:
    """The threshold of the ROC of (q, matched) minimising fpr + fn_weight * fnr, the first (highest)
    among equal costs; the ROC as sklearn's roc_curve builds it (a point per distinct q, highest first,
    interior points collinear with both neighbours dropped, an infinite threshold prepended).
    Needs both kinds of pair."""
    q = np.asarray(confidences, dtype=np.float64)
    y = np.asarray(matched, dtype=bool)
    if q.ndim != 1 or q.shape != y.shape or not (y.any() and not y.all()):
        raise ValueError("the ROC needs as many confidences as labels, matched and unmatched ones")
    order = np.argsort(-q, kind="stable")
    q, y = q[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(q)), q.size - 1]  # the last pair of each distinct q
    tps = np.cumsum(y)[last]
    fps = last + 1 - tps
    thresholds = q[last]
    if tps.size > 2:  # sklearn's drop_intermediate
        keep = np.r_[True, (np.diff(fps, 2) != 0) | (np.diff(tps, 2) != 0), True]
        tps, fps, thresholds = tps[keep], fps[keep], thresholds[keep]
    tps, fps, thresholds = np.r_[0, tps], np.r_[0, fps], np.r_[np.inf, thresholds]
    cost = fps / fps[-1] + fn_weight * (1 - tps / tps[-1])
    return float(thresholds[np.argmin(cost)])


class ConfidenceThresholdPolicy:
    """transformers' assistant confidence threshold with its ROC re-fit (module docstring)."""

    name = "hf-threshold"

    def __init__(
        self,
        d_max: int,
        threshold: float = INITIAL_THRESHOLD,
        num_tokens: int = NUM_ASSISTANT_TOKENS,
        schedule: str = SCHEDULE,
        min_pairs: int = MIN_PAIRS,
    ):
        self.d_max = check_int(d_max, "d_max")
        if not (isinstance(threshold, (int, float, np.floating)) and 0.0 <= threshold <= 1.0):
            raise ValueError(f"threshold must be within [0, 1], got {threshold!r}")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        self.initial_threshold, self.schedule = float(threshold), schedule
        self.initial_tokens = check_int(num_tokens, "num_assistant_tokens")
        self.min_pairs = check_int(min_pairs, "min_pairs", low=2)
        self.reset()

    def choose_length(self, buffer: DraftBufferLike) -> Decision:
        check_buffer(buffer)
        cap = min(self.num_tokens, self.d_max)
        q = check_confidences(buffer.confidences)
        d = 0
        while d < cap:
            if d == len(q):  # the next draft lies in a block not drafted yet
                buffer.extend(1)
                q = check_confidences(buffer.confidences)
            d += 1
            if round(q[d - 1], DIGITS) < self.threshold:  # ConfidenceCriteria stops after a token with p < threshold
                break
        return Decision(d)

    def update(self, record: RoundRecord) -> None:
        d, accepted = record.chosen_length, record.accepted
        if d == 0:  # an AR step: no draft was verified
            return
        if self.schedule == "heuristic":
            self.num_tokens = self.num_tokens + 2 if accepted == d else max(1, self.num_tokens - 1)
        kept = min(accepted + 1, d)  # the accepted drafts and the first rejected one
        self.pairs += tuple((round(float(q), DIGITS), i < accepted) for i, q in enumerate(record.confidences[:kept]))
        labels = {m for _, m in self.pairs}
        if len(self.pairs) >= self.min_pairs and labels == {True, False}:
            self.threshold = roc_threshold([q for q, _ in self.pairs], [m for _, m in self.pairs])

    def reset(self) -> None:
        self.threshold = self.initial_threshold
        self.num_tokens = self.initial_tokens
        self.pairs: tuple[tuple[float, bool], ...] = ()

    def snapshot(self) -> tuple:
        """The state carried across rounds (hashable): threshold, draft cap, (q, matched) pairs."""
        return (self.threshold, self.num_tokens, self.pairs)

    def restore(self, snapshot: tuple) -> None:
        self.threshold, self.num_tokens, self.pairs = snapshot
