"""alpha x d_max sweep on the tiny random pair, automatic alpha, the sweep CLI and figure."""

from __future__ import annotations

import math
import threading

import numpy as np
import pandas as pd
import pytest
import torch

from libraspec import profiling
from libraspec.__main__ import main
from libraspec.analysis.autoalpha import AutoAlphaLibraSpecPolicy
from libraspec.analysis.best_cell import best_cell
from libraspec.analysis.replay import replay
from libraspec.analysis.stepper import ArrayBuffer
from libraspec.analysis.theory import auto_alpha
from libraspec.analysis.trace import record_trace
from libraspec.analysis.whatif import RULES
from libraspec.cost import LatencyProfile
from libraspec.engine import DecodeConfig, SpeculativeDecoder
from libraspec.experiments.sweep import COLUMNS, parse_alphas, parse_d_maxes, run_sweep
from libraspec.models import registry
from libraspec.models.registry import tiny_pair
from libraspec.modes import AR, PAPER
from libraspec.records import RoundRecord, committed_text
from libraspec.spec import ALPHA_RANGE, RunSpec
from libraspec.views import tuning_plots

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=40)
PROMPTS = [[1, 40, 50, 60], [1, 70, 80, 90, 100, 110]]


@pytest.fixture(scope="module")
def decoder():
    return SpeculativeDecoder(tiny_pair("llama", seed=3), PROFILE)  # n = 7


def test_full_grid_with_finite_values(decoder):
    calls = []
    frame = run_sweep(
        decoder,
        PROMPTS,
        "2.0, auto",
        [7, 12],
        DecodeConfig(max_new_tokens=10),
        progress=lambda done, total, label: calls.append((done, total)),
        decode=None,  # every cell decoded
    )
    assert list(frame.columns) == COLUMNS and len(frame) == 4 and not frame.attrs["cancelled"]
    assert set(zip(frame["alpha"], frame["d_max"])) == {("2", 7), ("2", 12), ("auto", 7), ("auto", 12)}
    for column in ("tau", "mean_d", "alpha_used", "speedup_measured", "speedup_modeled", "mad_vs_oracle"):
        assert np.all(np.isfinite(frame[column].astype(float))), column
    assert (frame["tokens"] == 2 * 10).all()  # greedy: every cell generates the same tokens
    assert (frame["mean_d"] <= frame["d_max"]).all() and (frame["tau"] >= 1).all()
    assert frame.loc[frame["alpha"] == "2", "alpha_used"].tolist() == [2.0, 2.0]
    assert calls == [(k, 2 * (1 + 4)) for k in range(1, 11)]
    mad = frame["mad_vs_oracle"].to_numpy()
    assert best_cell(frame, "mad_vs_oracle") == (int(np.argmin(mad)) if (mad == mad.min()).sum() == 1 else None)
    assert (frame["noise_s"] >= 0).all() and set(frame["check"]) == {"decoded"}


def test_a_greedy_sweep_replays_its_grid_then_decodes_the_best_cells():
    """The replayed grid equals decoding every cell (float64: no near-ties), and the best cells by
    modeled speedup, one per set of identical decisions, are decoded for real as a check."""
    decoder = SpeculativeDecoder(tiny_pair("llama", seed=3, dtype=torch.float64), PROFILE)
    grid, config = ("1, 2.2, 8, auto", [7, 10, 14]), DecodeConfig(max_new_tokens=16)
    full = run_sweep(decoder, PROMPTS, *grid, config, decode=None)
    calls = []
    every = run_sweep(decoder, PROMPTS, *grid, config, lambda done, total, label: calls.append((done, total)), decode=2)
    assert list(every.columns) == COLUMNS and len(every) == 12 + 3 * len(RULES) and len(full) == 12
    quick = every[every["mode"] == PAPER]  # the rules' rows come after the cells
    assert quick.index.tolist() == list(range(12)) and set(full["mode"]) == {PAPER}
    for column in ("tokens", "rounds", "decisions", "alpha_used"):
        assert quick[column].tolist() == full[column].tolist(), column
    for column in ("tau", "mean_d", "modeled_s", "speedup_modeled", "mad_vs_oracle"):
        np.testing.assert_allclose(quick[column].astype(float), full[column].astype(float), rtol=1e-9, err_msg=column)
    decoded = quick[quick["check"] != "replay"]
    assert decoded["check"].tolist() == ["decoded: same decisions as its replay"] * 2
    assert decoded["decisions"].nunique() == 2 and np.isfinite(decoded["speedup_measured"].astype(float)).all()
    replayed = quick[quick["check"] == "replay"]
    assert replayed["speedup_measured"].isna().all() and replayed["wall_s"].isna().all()
    firsts = quick.sort_values("speedup_modeled", ascending=False, kind="stable").drop_duplicates("decisions")
    assert set(decoded.index) == set(firsts.index[:2])  # the two best distinct decisions
    assert calls[-1] == (2 * (1 + 2), 2 * (1 + 2))  # AR and two cells per prompt decoded, nothing else


def test_a_greedy_sweep_replays_every_other_rule_at_each_d_max_from_the_same_traces(decoder):
    """Issue 43 item 4: one row per rule of `whatif.RULES` x d_max after the cells, each the rounds
    `analysis.replay.replay` gives that mode on the same traces (its modeled seconds and rounds),
    alpha NaN (no rule reads it), modeled only; the decoded best cell stays a LibraSpec cell."""
    d_maxes, config = [7, 12], DecodeConfig(max_new_tokens=10)
    frame = run_sweep(decoder, PROMPTS, "2.2", d_maxes, config, decode=1)
    cells, rules = frame[frame["mode"] == PAPER], frame[frame["mode"] != PAPER]
    assert len(cells) == 2 and cells.index.tolist() == [0, 1]
    assert list(zip(rules["mode"], rules["d_max"])) == [(m, d) for m in RULES for d in d_maxes]
    assert rules["alpha"].isna().all() and set(rules["check"]) == {"replay"} and rules["wall_s"].isna().all()
    assert set(frame.loc[frame["check"] != "replay", "mode"]) == {PAPER}  # the one decoded cell
    assert rules["decisions"].nunique() > 1  # the rules decided differently: the comparison below bites
    traces = []
    for prompt in PROMPTS:
        text = committed_text(decoder.run(prompt, AR, None, config))
        traces.append(record_trace(decoder.pair, decoder.drafter.name, prompt, text, 10, max(d_maxes)))
    for row in rules.itertuples():
        runs = [replay(t, row.mode, PROFILE, RunSpec(d_max=row.d_max), lookahead=row.d_max) for t in traces]
        assert row.rounds == sum(map(len, runs)) and row.tokens == 2 * 10, (row.mode, row.d_max)
        assert row.modeled_s == pytest.approx(sum(run[-1].cumulative_modeled_s for run in runs), rel=1e-12)
        assert row.speedup_modeled == pytest.approx(
            cells["speedup_modeled"].iloc[0] * cells["modeled_s"].iloc[0] / row.modeled_s
        )
    assert len(run_sweep(decoder, PROMPTS, "2.2", d_maxes, config, decode=0, rules=False)) == 2
    sampled = run_sweep(decoder, PROMPTS, "2.2", [7], DecodeConfig(max_new_tokens=4, temperature=1.0), decode=0)
    assert set(sampled["mode"]) == {PAPER} and len(sampled) == 1  # sampling: every cell decoded, no rule


def test_rule_rows_are_neither_drawn_nor_crowned_in_the_heat_maps():
    """A rule row faster than every cell, at a d_max of the grid, changes no heat map and no best cell."""
    cells = pd.DataFrame(
        {
            "mode": [PAPER] * 2,
            "alpha": ["1.6", "2.2"],
            "d_max": [16, 16],
            "speedup_modeled": [1.1, 1.3],
            "tau": [2.0, 2.5],
            "mad_vs_oracle": [3.0, 1.0],
        }
    )
    rule = pd.DataFrame(
        {
            "mode": ["g4"],
            "alpha": [float("nan")],
            "d_max": [16],
            "speedup_modeled": [9.0],
            "tau": [9.0],
            "mad_vs_oracle": [0.0],
        }
    )
    both, alone = (
        tuning_plots.sweep_figure(pd.concat([cells, rule], ignore_index=True)),
        tuning_plots.sweep_figure(cells),
    )
    assert both.to_json() == alone.to_json()
    assert [t.y[0] for t in both.data if t.type == "scatter"] == ["2.2"] * 3  # the 1.3x cell, not the 9x rule
    assert list(both.data[0].y) == ["1.6", "2.2"]  # no NaN alpha row


def test_cancel_stops_between_runs(decoder):
    cancel, calls = threading.Event(), []

    def progress(done, total, label):
        calls.append(done)
        if done == 3:  # two AR runs and the first cell's first prompt
            cancel.set()

    frame = run_sweep(decoder, PROMPTS, [2.2], [7, 12], DecodeConfig(max_new_tokens=6), progress, cancel, None)
    assert calls == [1, 2, 3] and frame.attrs["cancelled"] and frame.empty
    # a replayed sweep stops while it records the traces, before any cell
    cancel.clear()
    labels = []

    def tracing(done, total, label):
        labels.append(label)
        if label.startswith("recording"):
            cancel.set()

    frame = run_sweep(decoder, PROMPTS, [2.2], [7, 12], DecodeConfig(max_new_tokens=6), tracing, cancel)
    assert frame.attrs["cancelled"] and frame.empty and labels[-1].startswith("recording")
    cancel.set()
    assert run_sweep(decoder, PROMPTS, [2.2], [7], DecodeConfig(max_new_tokens=6), cancel=cancel).attrs["cancelled"]


def test_the_grid_is_clamped_as_a_race_is_and_says_so():
    """alpha and d_max values go through RunSpec.checked: d_max below n rises to n (Algorithm 1
    starts there), alpha beyond the range falls to its top, values that meet are kept once."""
    from libraspec.experiments.sweep import checked_grid
    from libraspec.spec import ALPHA_RANGE

    alphas, d_maxes, notes = checked_grid("2.2, 100, auto, -1", "5, 7, 9", 7)
    assert alphas == (2.2, ALPHA_RANGE[1], "auto", ALPHA_RANGE[0]) and d_maxes == (7, 9)
    assert notes == [
        "alpha 100 -> 64 (allowed 0.05..64)",
        "alpha -1 -> 0.05 (allowed 0.05..64)",
        "d_max 5 -> 7 (allowed 7..512)",
    ]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda d: run_sweep(d, [], [2.2], [7], DecodeConfig(max_new_tokens=4)), "no prompts"),
        (lambda d: parse_alphas("2.2, fast"), "numbers or 'auto'"),
        (lambda d: parse_alphas("2.2, 2.2"), "twice"),
        (lambda d: parse_alphas("inf"), "finite"),
        (lambda d: parse_d_maxes("16, x"), "integers"),
        (lambda d: parse_d_maxes("16, 16"), "distinct"),
    ],
)
def test_bad_input_is_refused(decoder, call, match):
    with pytest.raises(ValueError, match=match):
        call(decoder)


def _round(tau: int, d: int) -> RoundRecord:
    return RoundRecord(
        mode="libraspec",
        round_index=0,
        start_position=0,
        draft_tokens=(),
        confidences=(),
        blocks_drafted=1,
        policy_steps=(),
        eps_bounds=(),
        chosen_length=d,
        accepted=tau - 1,
        committed_tokens=tuple(range(tau)),
        bonus_token=0,
        oracle_length=None,
        draft_s=0.0,
        policy_s=0.0,
        verify_s=0.0,
        modeled_s=0.0,
        cumulative_tokens=tau,
        cumulative_s=0.0,
        cumulative_modeled_s=0.0,
    )


def test_auto_alpha_follows_the_formula_and_resets():
    policy = AutoAlphaLibraSpecPolicy(PROFILE, d_max=24, prior_tau=2.0)
    _, c = PROFILE.linear_fit()
    assert policy.alpha == pytest.approx(PROFILE.verify_time(8) / (2.0 * c))  # T(n) / (tau * c), n = 7
    assert policy.alpha == pytest.approx(auto_alpha(PROFILE, 2.0, 7))
    policy.update(_round(tau=6, d=13))
    assert policy.mean_tau() == pytest.approx(4.0) and policy.mean_length() == 13
    assert policy.alpha == pytest.approx(PROFILE.verify_time(14) / (4.0 * c))
    decision = policy.choose_length(ArrayBuffer.revealing([0.9] * 28, 7))
    assert 7 <= decision.d <= 24 and decision.alpha == policy.alpha
    policy.update(_round(tau=1, d=0))  # a round that submitted nothing teaches nothing
    assert policy.mean_length() == 13
    policy.reset()
    assert policy.alpha == pytest.approx(auto_alpha(PROFILE, 2.0, 7))


def test_auto_alpha_clamps_and_refuses_bad_settings():
    flat = LatencyProfile((0.01, 0.01, 0.01), (0.001,), 2)
    assert AutoAlphaLibraSpecPolicy(flat, d_max=4).alpha == ALPHA_RANGE[1]  # c = 0: alpha unbounded, clamped
    cheap = AutoAlphaLibraSpecPolicy(PROFILE, d_max=24, prior_tau=2.0, alpha_range=(0.1, 3.0))
    assert cheap.alpha == 3.0
    with pytest.raises(ValueError, match="prior_tau"):
        AutoAlphaLibraSpecPolicy(PROFILE, d_max=24, prior_tau=0.5)
    with pytest.raises(ValueError, match="alpha_range"):
        AutoAlphaLibraSpecPolicy(PROFILE, d_max=24, alpha_range=(2.0, 1.0))


def test_sweep_figure_marks_the_best_cells():
    frame = pd.DataFrame(
        {
            "alpha": ["1.6", "1.6", "auto", "auto"],
            "d_max": [16, 24, 16, 24],
            "speedup_modeled": [1.1, 1.3, 1.2, 0.9],
            "speedup_measured": [1.0, 0.8, 1.4, 1.1],
            "tau": [2.0, 2.5, 2.2, 2.1],
            "mad_vs_oracle": [3.0, 1.0, 2.0, 4.0],
        }
    )
    fig = tuning_plots.sweep_figure(frame)
    heatmaps = [t for t in fig.data if t.type == "heatmap"]
    assert [t.name for t in heatmaps] == ["speedup_modeled", "speedup_measured", "tau", "mad_vs_oracle"]
    assert np.array_equal(np.array(heatmaps[0].z), [[1.1, 1.3], [1.2, 0.9]])
    # each heatmap has its own colour bar beside its subplot (issue 45: none had one)
    assert all(t.showscale for t in heatmaps) and len({(t.colorbar.x, t.colorbar.y) for t in heatmaps}) == 4
    for t, (_, title) in zip(heatmaps, tuning_plots.SWEEP_METRICS):
        assert title.startswith(t.colorbar.title.text)
    best = {t.name: (t.x[0], t.y[0]) for t in fig.data if t.type == "scatter"}
    assert best == {
        "best speedup_modeled": ("24", "1.6"),
        "best tau": ("24", "1.6"),
        "best mad_vs_oracle": ("24", "1.6"),
    }  # no noise known: no measured winner claimed
    assert "within timing noise): measured speedup (x), decoded cells" in fig.layout.title.text
    timed = frame.assign(wall_s=10.0, noise_s=[0.1, 0.1, 0.1, 0.1])  # 1% noise: 1.4 leads 1.1 beyond it
    best = {t.name: (t.x[0], t.y[0]) for t in tuning_plots.sweep_figure(timed).data if t.type == "scatter"}
    assert best["best speedup_measured"] == ("16", "auto")
    partial = tuning_plots.sweep_figure(frame.iloc[:1], alphas=["1.6", "auto"], d_maxes=[16, 24])
    z = np.array(partial.data[0].z, dtype=float)
    assert z.shape == (2, 2) and z[0, 0] == 1.1 and np.isnan(z[1, 1])


def test_no_best_cell_is_crowned_within_noise_or_among_identical_decisions():
    """Cells whose decisions are identical tie on every decision metric; measured speedups closer
    than NOISE_Z noise standard deviations tie too. Only a cell ahead of all others is best."""
    same = pd.DataFrame(
        {
            "alpha": ["1", "2", "4"],
            "d_max": [16, 16, 16],
            "speedup_modeled": [1.68] * 3,
            "tau": [1.78] * 3,
            "mad_vs_oracle": [0.5] * 3,
            "speedup_measured": [3.41, 3.2, 3.3],
            "wall_s": [10.0] * 3,
            "noise_s": [0.5] * 3,
        }
    )  # 5% noise: 3.41 vs 3.3 is a tie
    assert all(best_cell(same, m) is None for m in ("speedup_modeled", "tau", "mad_vs_oracle", "speedup_measured"))
    clear = same.assign(noise_s=[0.01] * 3)  # 0.1% noise: 3.41 is ahead
    assert best_cell(clear, "speedup_measured") == 0
    assert best_cell(same.assign(mad_vs_oracle=[0.5, 0.25, 0.5]), "mad_vs_oracle") == 1
    # issue 34 defect 2: 1.54x over 1.37x with identical decisions was crowned; twins tie however
    # small the noise estimate, and a cell whose decisions are its own still wins
    twins = clear.assign(decisions=["a", "b", "a"], speedup_measured=[1.54, 1.2, 1.37])
    assert best_cell(twins, "speedup_measured") is None
    assert best_cell(twins.assign(decisions=["a", "b", "c"]), "speedup_measured") == 0
    # a third cell with a wide noise reaches the best although the runner-up does not: no winner
    wide = clear.assign(speedup_measured=[3.41, 3.3, 3.0], noise_s=[0.01, 0.01, 2.0])
    assert best_cell(wide, "speedup_measured") is None
    assert best_cell(wide.assign(noise_s=[0.01] * 3), "speedup_measured") == 0
    assert not [t for t in tuning_plots.sweep_figure(same).data if t.type == "scatter"]


def refuse_to_load(*args, **kwargs):
    raise AssertionError("a model was loaded")


def test_cli_writes_one_row_per_cell(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LIBRASPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(profiling, "cached_profile", lambda pair, **kwargs: PROFILE)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Hi"}\n{"question": "Why?"}\n')
    out = tmp_path / "sweep.csv"
    args = [
        "sweep",
        "--prompts",
        str(prompts),
        "--alphas",
        "1.6,auto",
        "--d-max",
        "7,9",
        "--max-new-tokens",
        "6",
        "--model",
        "tiny-llama",
        "--quiet",
        "--out",
        str(out),
    ]
    code = main(args)
    frame = pd.read_csv(out)
    assert code == 0 and len(frame) == 4 + 2 * len(RULES) and list(frame.columns) == COLUMNS
    assert math.isfinite(frame["speedup_modeled"].sum())
    cells, rules = frame[frame["mode"] == PAPER], frame[frame["mode"] != PAPER]
    assert set(zip(cells["alpha"], cells["d_max"])) == {("1.6", 7), ("1.6", 9), ("auto", 7), ("auto", 9)}
    assert list(zip(rules["mode"], rules["d_max"])) == [(m, d) for m in RULES for d in (7, 9)]
    assert rules["alpha"].isna().all() and set(rules["check"]) == {"replay"}
    assert main([*args, "--no-rules"]) == 0 and len(pd.read_csv(out)) == 4
    monkeypatch.setattr(registry, "load_pair", refuse_to_load)  # a grid that is not numbers: refused at once
    for grid, words in ((["--alphas", "x"], "alpha values must be numbers"), (["--d-max", "7,y"], "d_max values")):
        with pytest.raises(SystemExit):
            main(["sweep", "--prompts", str(prompts), *grid, "--out", str(out)])
        assert words in capsys.readouterr().err


def test_cli_clamps_the_decoding_knobs_as_any_run_and_says_so(tmp_path, monkeypatch, capsys):
    """Max new tokens, temperature and seed go through `RunSpec.checked` like the grid's knobs."""
    monkeypatch.setenv("LIBRASPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(profiling, "cached_profile", lambda pair, **kwargs: PROFILE)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Hi"}\n')
    out = tmp_path / "sweep.csv"
    args = ["sweep", "--prompts", str(prompts), "--alphas", "2", "--d-max", "7", "--model", "tiny-llama"]
    args += ["--max-new-tokens", "0", "--temperature", "-1", "--seed", "-5", "--quiet", "--out", str(out)]
    assert main(args) == 0 and len(pd.read_csv(out)) == 1 + len(RULES)  # one cell, each rule at d_max 7
    err = capsys.readouterr().err
    for note in ("max new tokens 0 -> 1", "temperature -1 -> 0", "seed -5 -> 0"):
        assert f"sweep: corrected {note}" in err


@pytest.mark.app  # imports ui/
def test_prompt_sets_of_the_sweep_tab():
    from ui.sweeps import EXAMPLES, load_prompt_set, prompt_sets

    three = load_prompt_set(EXAMPLES, 3)
    assert len(three) == 3 and len(set(three)) == 3
    assert len(load_prompt_set(EXAMPLES, 9)) == 9 == len(set(load_prompt_set(EXAMPLES, 9)))
    for name in prompt_sets()[1:]:
        assert len(load_prompt_set(name, 2)) == 2
    with pytest.raises(ValueError, match="unknown prompt set"):
        load_prompt_set("nope.jsonl", 2)


@pytest.mark.app  # imports ui/
def test_the_final_status_names_the_best_cell_and_the_fastest_rule_modeled():
    from ui.sweeps import RULE_COLUMNS, modeled_leaders, split_rules

    frame = pd.DataFrame(
        {
            "mode": [PAPER, PAPER, "g4", "vllm-adaptive", "vllm-adaptive"],
            "alpha": ["1.6", "2.2", float("nan"), float("nan"), float("nan")],
            "d_max": [16, 16, 16, 16, 24],
            "speedup_modeled": [1.1, 1.3, 0.9, 1.7, 1.2],
        }
    ).reindex(columns=COLUMNS)
    cells, rules = split_rules(frame)
    assert len(cells) == 2 and list(rules.columns) == RULE_COLUMNS and rules["mode"].tolist()[0] == "g4"
    assert modeled_leaders(frame) == (
        "Modeled, same drafts: best cell alpha = 2.2, d_max = 16 (1.30x); "
        "fastest other rule vLLM adaptive at d_max = 16 (1.70x)."
    )
    tied = frame.assign(speedup_modeled=[1.3, 1.3, 1.7, 1.7, 1.2])
    assert modeled_leaders(tied) == (
        "Modeled, same drafts: no cell ahead of the rest; "
        "fastest other rule G4 at d_max = 16 (1.70x; tied with 1 more)."
    )
    assert modeled_leaders(frame.iloc[:2]) == "Modeled, same drafts: best cell alpha = 2.2, d_max = 16 (1.30x)."


@pytest.mark.app  # imports ui/
def test_the_final_status_names_the_measured_leader_only_beyond_noise():
    from ui.sweeps import measured_leader

    frame = pd.DataFrame(
        {
            "mode": [PAPER, PAPER, PAPER],
            "alpha": ["1.6", "2.2", "4"],
            "d_max": [16, 16, 16],
            "speedup_measured": [1.1, 1.4, float("nan")],
            "wall_s": [10.0, 8.0, float("nan")],
            "noise_s": [0.01, 0.01, float("nan")],
            "decisions": ["a", "b", "c"],
        }
    ).reindex(columns=COLUMNS)
    assert measured_leader(frame) == "Measured: best alpha = 2.2, d_max = 16 (1.40x)."
    noisy = frame.assign(noise_s=[3.0, 3.0, float("nan")])
    assert measured_leader(noisy) == "Measured (2 decoded cells): none ahead of the rest beyond timing noise."
    assert measured_leader(frame.assign(speedup_measured=float("nan"))) == ""
