"""One alpha to recommend: the alpha whose LibraSpec replays of a visitor's own greedy races are
fastest under one latency profile, with how sure that is.

Section 3.4's alpha = T / (tau c) is a formula; on this CPU it is 5 to 13 times the alpha Algorithm 1
can use (docs/ARCHITECTURE.md, "Alpha from the price list"). A tuner needs the alpha that works on
their own texts, for their drafter, in their cost regime. So the recommendation replays Algorithm 1
(`analysis.replay`, modeled: no timing noise) on the visitor's draft traces of one drafter for every
alpha of RECOMMEND_ALPHAS and takes the fastest over all of them (the sum of modeled seconds against
the sum of AR's: a long text weighs what it costs). Its uncertainty is a bootstrap over the texts:
the traces resampled with replacement `resamples` times, the fastest alpha of each resample; the
interval holds the central 80% of those alphas (one text: no interval). Ties go to the smaller alpha.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..cost import LatencyProfile
from ..modes import AR, PAPER
from ..spec import RunSpec
from .regimes import describe
from .replay import replay
from .trace import DraftTrace

# the alphas the recommendation replays: the What-if grid's and the paper's 2.2, finer where Algorithm 1
# turns on this project's drafters (0.5-8)
RECOMMEND_ALPHAS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.2, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0)
COVER = 0.8  # the share of resampled fastest alphas the interval holds


@dataclass(frozen=True)
class Recommendation:
    """The recommended alpha for one drafter under one profile, from `texts` replayed texts."""

    alpha: float
    low: float  # the interval of the resamples' fastest alphas (equal to alpha for one text)
    high: float
    speedup: float  # LibraSpec's modeled speedup over AR at `alpha`, over all the texts
    paper_speedup: float  # the same at the paper's alpha 2.2
    texts: int
    drafter: str
    profile: str  # `regimes.describe` of the profile: the regime it is for
    d_max: int

    def words(self) -> str:
        """The recommendation in one sentence, with its uncertainty and the regime it is for."""
        spread = f" (80% of resamples of your texts: {self.low:g}-{self.high:g})" if self.texts > 1 else " (one text)"
        return (
            f"alpha {self.alpha:g}{spread}: LibraSpec's modeled speedup {self.speedup:.2f}x against "
            f"{self.paper_speedup:.2f}x at the paper's 2.2, replayed on {self.texts} of your greedy race"
            f"{'s' if self.texts != 1 else ''} with the {self.drafter} drafter under {self.profile}, d_max {self.d_max}"
        )


def alpha_seconds(
    traces: Sequence[DraftTrace], profile: LatencyProfile, d_max: int, alphas=RECOMMEND_ALPHAS
) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, ar_seconds): LibraSpec's modeled seconds of each trace at each alpha, (traces, alphas),
    and AR's of each trace, (traces,)."""
    seconds = np.zeros((len(traces), len(alphas)))
    ar = np.zeros(len(traces))
    for t, trace in enumerate(traces):
        ar[t] = replay(trace, AR, profile)[-1].cumulative_modeled_s
        for a, alpha in enumerate(alphas):
            settings = dataclasses.replace(RunSpec(), alpha=float(alpha), d_max=int(d_max))
            seconds[t, a] = replay(trace, PAPER, profile, settings)[-1].cumulative_modeled_s
    return seconds, ar


def recommend_alpha(
    traces: Sequence[DraftTrace],
    profile: LatencyProfile,
    d_max: int = RunSpec.d_max,
    alphas=RECOMMEND_ALPHAS,
    resamples: int = 400,
    seed: int = 0,
) -> Recommendation:
    """The fastest alpha over `traces` (one drafter) under `profile`, with its bootstrap interval
    (module docstring). d_max is capped at the drafts the traces hold a position."""
    if not traces:
        raise ValueError("a recommendation needs at least one replayed race")
    if len({trace.drafter for trace in traces}) > 1:
        raise ValueError("a recommendation is for one drafter: its traces must all come from it")
    d_max = max(1, min(int(d_max), min(trace.lookahead for trace in traces)))
    alphas = tuple(float(a) for a in alphas)
    seconds, ar = alpha_seconds(traces, profile, d_max, alphas)
    best = int(np.argmax(ar.sum() / seconds.sum(axis=0)))  # the first of equal speedups: the smaller alpha
    rng = np.random.default_rng(seed)
    picks = []
    for _ in range(resamples if len(traces) > 1 else 0):
        rows = rng.integers(0, len(traces), len(traces))
        picks.append(alphas[int(np.argmax(ar[rows].sum() / seconds[rows].sum(axis=0)))])
    tail = (1.0 - COVER) / 2
    low, high = (
        (float(np.quantile(picks, tail, method="lower")), float(np.quantile(picks, 1 - tail, method="higher")))
        if picks
        else (alphas[best], alphas[best])
    )
    paper = alphas.index(RunSpec.alpha) if RunSpec.alpha in alphas else best
    return Recommendation(
        alpha=alphas[best],
        low=low,
        high=high,
        speedup=float(ar.sum() / seconds[:, best].sum()),
        paper_speedup=float(ar.sum() / seconds[:, paper].sum()),
        texts=len(traces),
        drafter=traces[0].drafter,
        profile=describe(profile),
        d_max=d_max,
    )
