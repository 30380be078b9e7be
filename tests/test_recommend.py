"""The one alpha recommendation (libraspec/analysis/recommend.py): the fastest alpha of LibraSpec's
replays over a visitor's texts under one profile, its bootstrap interval over the texts, ties to the
smaller alpha. Hand-made traces and profiles: no model runs."""

from __future__ import annotations

import numpy as np
import pytest
from test_lockstep_group import hand_profiles, hand_trace, hand_traces

from libraspec.analysis.recommend import RECOMMEND_ALPHAS, alpha_seconds, recommend_alpha
from libraspec.analysis.replay import replay
from libraspec.spec import RunSpec

LAYER = "unit"  # tests/conftest.py


def test_the_recommendation_is_the_fastest_alpha_over_the_texts_with_its_interval():
    traces, profile = hand_traces("dflash"), hand_profiles()[1]
    seconds, ar = alpha_seconds(traces, profile, 9)
    for t, trace in enumerate(traces):  # each cell is the replay of that text at that alpha
        assert ar[t] == replay(trace, "ar", profile)[-1].cumulative_modeled_s
        want = replay(trace, "libraspec", profile, RunSpec(alpha=RECOMMEND_ALPHAS[3], d_max=9))
        assert seconds[t, 3] == pytest.approx(want[-1].cumulative_modeled_s)
    got = recommend_alpha(traces, profile, d_max=9)
    speed = ar.sum() / seconds.sum(axis=0)
    assert got.alpha == RECOMMEND_ALPHAS[int(np.argmax(speed))] and got.speedup == pytest.approx(speed.max())
    assert got.paper_speedup == pytest.approx(speed[RECOMMEND_ALPHAS.index(2.2)]) and got.speedup >= got.paper_speedup
    assert got.low <= got.alpha <= got.high and got.texts == 3 and got.drafter == "dflash" and got.d_max == 9
    assert "80% of resamples" in got.words() and got.profile in got.words()
    # ties go to the smaller alpha: alphas that decide alike tie on every text
    flat = recommend_alpha(traces, profile, d_max=9, alphas=(4.0, 4.0000001))
    assert flat.alpha == 4.0
    one = recommend_alpha(traces[:1], profile, d_max=9)
    assert one.low == one.high == one.alpha and "(one text)" in one.words()
    with pytest.raises(ValueError, match="at least one"):
        recommend_alpha([], profile)
    with pytest.raises(ValueError, match="one drafter"):
        recommend_alpha([traces[0], hand_trace(4, 20, "lookup")], profile)
