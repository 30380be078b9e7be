"""Benchmark statistics and provenance: bootstrap intervals over prompts, regime statistics on
hand-made rounds, the provenance of a run on the tiny pair, and the report's verdicts."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from libraspec.cost import LatencyProfile
from libraspec.experiments import bench, provenance, report, report_md, stats
from libraspec.models.registry import tiny_pair
from libraspec.records import PolicyStep, RoundRecord, read_trace, records_to_frame, summarize, write_parquet

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=50)
PROMPTS = ["Add 2 and 3.", "Why is ice slippery?", "Say hello.", "Name a colour."]


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("LIBRASPEC_CACHE", str(tmp_path / "cache"))


def within(value: float, interval) -> bool:
    """value inside the interval, up to rounding (a point interval sums in another order)."""
    low, high = interval
    return low * (1 - 1e-9) <= value <= high * (1 + 1e-9)


def rows_of(speedups: list[float], tokens: int = 10) -> list[dict]:
    """Per-prompt rows whose prompt i runs at speedups[i] over an AR step of 0.1 s."""
    return [
        {
            "tokens": tokens,
            "wall_s": tokens * 0.1 / s,
            "modeled_s": tokens * 0.1 / s,
            "ar_tokens": tokens,
            "ar_wall_s": tokens * 0.1,
            "ar_modeled_s": tokens * 0.1,
        }
        for s in speedups
    ]


def test_identical_prompts_give_a_point_interval():
    low, high = stats.speedup_interval(rows_of([1.5] * 6), "wall_s")
    assert low == pytest.approx(1.5) and high == pytest.approx(1.5)


def test_interval_contains_the_ratio_of_sums_and_narrows_with_more_prompts():
    speedups = [0.8, 1.1, 1.4, 2.0, 0.9, 1.6]
    rows = rows_of(speedups)
    point = sum(r["ar_wall_s"] for r in rows) / sum(r["wall_s"] for r in rows)  # equal tokens everywhere
    low, high = stats.speedup_interval(rows, "wall_s")
    assert low < point < high
    # the same spread over four times the prompts: the interval shrinks by about half
    low4, high4 = stats.speedup_interval(rows * 4, "wall_s")
    assert low4 < point < high4 and high4 - low4 < 0.75 * (high - low)
    assert stats.speedup_interval(rows, "wall_s", seed=1) != (low, high)  # seeded: another seed, other draws
    assert stats.speedup_interval(rows, "wall_s") == (low, high)
    assert (
        stats.speedup_interval([{k: v for k, v in r.items() if not k.startswith("ar_")} for r in rows], "wall_s")
        is None
    )  # no AR: nothing to divide by


def test_bench_keeps_per_prompt_results_and_intervals():
    pair = tiny_pair("llama", seed=5)
    spec = bench.BenchSpec(modes=("ar", "static", "libraspec"), max_new_tokens=8, temperature=1.0)
    result = bench.run_bench(pair, PROMPTS, spec, profile=PROFILE)
    modes = result.summary["modes"]
    ar_rows = modes["ar"]["per_prompt"]
    for label, entry in modes.items():
        rows = entry["per_prompt"]
        assert len(rows) == len(PROMPTS) == entry["prompts"]
        assert sum(r["tokens"] for r in rows) == entry["tokens"]
        assert sum(r["wall_s"] for r in rows) == pytest.approx(entry["wall_s"])
        assert sum(r["modeled_s"] for r in rows) == pytest.approx(entry["modeled_s"])
        for row, ar in zip(rows, ar_rows):  # AR of the same prompt beside each row
            assert (row["ar_tokens"], row["ar_wall_s"], row["ar_modeled_s"]) == (
                ar["tokens"],
                ar["wall_s"],
                ar["modeled_s"],
            )
        for key in ("speedup_measured", "speedup_modeled"):
            assert within(entry[key], entry[f"{key}_ci"])
    assert result.summary["config"]["bootstrap"] == {"resamples": 2000, "level": 0.95, "seed": 0}


def test_modeled_interval_without_ar_uses_the_profile():
    spec = bench.BenchSpec(modes=("static",), max_new_tokens=6)
    entry = bench.run_bench(tiny_pair("llama"), PROMPTS[:2], spec, profile=PROFILE).summary["modes"]["static"]
    assert entry["speedup_measured_ci"] is None
    assert within(entry["speedup_modeled"], entry["speedup_modeled_ci"])


def test_provenance_of_a_run(tmp_path):
    target, drafter = tmp_path / "target.safetensors", tmp_path / "drafter.safetensors"
    target.write_bytes(b"target weights")
    drafter.write_bytes(b"drafter weights" * 1000)
    pair = dataclasses.replace(tiny_pair("llama"), weight_files={"target": (target,), "drafter": (drafter,)})
    spec = bench.BenchSpec(modes=("ar", "static"), max_new_tokens=4)
    config = bench.run_bench(pair, PROMPTS[:1], spec, profile=PROFILE).summary["config"]
    prov = config["provenance"]
    assert re.fullmatch(r"[0-9a-f]{40}", prov["git_commit"]) and isinstance(prov["git_dirty"], bool)
    assert [f["role"] for f in prov["files"]] == ["target", "drafter"]
    for entry, path in zip(prov["files"], (target, drafter)):
        assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
        assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert entry["bytes"] == path.stat().st_size and entry["path"] == str(path.resolve())
    assert all(isinstance(prov["load_1min"][k], float) for k in ("before", "after"))
    assert 0.0 <= prov["others_cpu_share"] <= 1.0
    assert {"torch", "transformers"} <= set(config["versions"])
    # tiny pairs load no files: nothing to hash
    plain = bench.run_bench(tiny_pair("llama"), PROMPTS[:1], spec, profile=PROFILE).summary["config"]
    assert plain["provenance"]["files"] == []


def test_digests_are_cached_by_path_size_and_mtime(tmp_path, monkeypatch):
    path = tmp_path / "w.bin"
    path.write_bytes(b"abc")
    first = provenance.cached_sha256(path)
    monkeypatch.setattr(provenance, "sha256_file", lambda p: pytest.fail("hashed again"))
    assert provenance.cached_sha256(path) == first == hashlib.sha256(b"abc").hexdigest()
    monkeypatch.undo()
    path.write_bytes(b"abcd")  # new size: hashed again
    assert provenance.cached_sha256(path) == hashlib.sha256(b"abcd").hexdigest()


def libra(d: int, dstar: int | None, steps=()) -> RoundRecord:
    """A LibraSpec round that submitted d drafts, accepted none and committed one token."""
    return RoundRecord(
        mode="libraspec",
        round_index=0,
        start_position=5,
        draft_tokens=(1,) * 4,
        confidences=(0.5,) * 4,
        blocks_drafted=1,
        policy_steps=tuple(steps),
        eps_bounds=(),
        chosen_length=d,
        accepted=0,
        committed_tokens=(1,),
        bonus_token=1,
        oracle_length=dstar,
        draft_s=0.01,
        policy_s=0.0,
        verify_s=0.05,
        modeled_s=0.06,
        cumulative_tokens=1,
        cumulative_s=0.06,
        cumulative_modeled_s=0.06,
    )


# n = 4, d_max = 10: a rollback, an extension to 8 that ends where it stands, an extension capped
# at d_max, an AR step without d*, and a round that kept d = n
ROUNDS = [
    libra(3, 1, [PolicyStep(4, 3, 3, 1, 0, True)]),
    libra(8, 8, [PolicyStep(4, 8, 8, 0, 1, False), PolicyStep(8, 8, 8, 0, 0, True)]),
    libra(10, 5, [PolicyStep(4, 12, 10, 2, 2, False)]),
    libra(0, None),
    libra(4, 2),
]


@pytest.mark.parametrize("through_parquet", [False, True])
def test_regime_stats_by_hand(tmp_path, through_parquet):
    frame = records_to_frame(ROUNDS)
    if through_parquet:  # benchmarks/drafters.py reads the saved records
        frame = read_trace(write_parquet(frame, str(tmp_path / "r.parquet")))
    got = stats.regime_stats(frame, n=4)
    assert got["rounds"] == 5 and got["judged"] == 4  # d* = 1, 8, 5, 2
    assert got["dstar_histogram"] == {"0": 0, "1": 1, "2": 1, "3": 0, "4-7": 1, "8+": 1}
    assert got["dstar_ge3_count"] == 2 and got["dstar_ge3"] == 0.5
    assert got["mad_constant_1"] == pytest.approx((0 + 7 + 4 + 1) / 4)
    assert got["mad_static_n"] == pytest.approx((3 + 4 + 1 + 2) / 4)
    assert (
        got["extends"],
        got["rolls_back"],
        got["further_block"],
        got["d_max_bound"],
        got["ar_steps"],
    ) == pytest.approx((0.4, 0.2, 0.4, 0.2, 0.2))
    assert got["max_d"] == 10
    assert summarize(ROUNDS).mad_vs_oracle == pytest.approx((2 + 0 + 5 + 2) / 4)  # the mode's own MAD


def test_regime_of_no_judged_rounds_is_none_not_nan():
    got = stats.regime_stats(records_to_frame([libra(4, None)]), n=4)
    assert got["judged"] == 0 and got["dstar_ge3"] is None and got["mad_constant_1"] is None
    assert sum(got["dstar_histogram"].values()) == 0


def entry(mode: str, value: float, interval, length: int | None = None, best: bool = False) -> dict:
    out = {
        "mode": mode,
        "speedup_measured": value,
        "speedup_measured_ci": interval,
        "speedup_modeled": value,
        "speedup_modeled_ci": interval,
    }
    return out | ({"length": length, "best": best} if mode == "static" else {})


def test_overlapping_intervals_are_not_distinguishable():
    modes = {
        "ar": entry("ar", 1.0, (1.0, 1.0)),
        "static-4": entry("static", 1.30, (1.1, 1.5), 4, True),
        "static-8": entry("static", 1.25, (1.0, 1.45), 8),
        "libraspec": entry("libraspec", 1.4, (1.2, 1.6)),
        "g4": entry("g4", 0.9, (0.8, 1.0)),
    }
    assert stats.compare(modes["libraspec"], modes["static-4"], "speedup_modeled") == "not distinguishable"
    assert stats.compare(modes["libraspec"], modes["g4"], "speedup_modeled") == "faster"
    assert stats.compare(modes["g4"], modes["libraspec"], "speedup_measured") == "slower"
    text = "\n".join(report_md.comparisons(modes))
    assert "LibraSpec, measured: not distinguishable from static d=4, static d=8; faster than G4." in text
    assert "best static length (static d=4, highest measured speedup) is not distinguishable from static d=8" in text


def test_sample_tags():
    assert report_md.sample_tag(report.QUICK, 6) == f" (quick: 6 prompts x {report.QUICK.max_new_tokens} tokens)"
    assert report_md.sample_tag(report.DEFAULT, 18) == f" (18 prompts x {report.DEFAULT.max_new_tokens} tokens)"


def test_header_says_when_the_machine_was_busy():
    """The warning reads the share of the CPU other processes used during each run, not the load
    average, which a report's own threads raise for every run after its first."""

    def result(share: float) -> bench.BenchResult:
        return bench.BenchResult(
            {"config": {"provenance": {"load_1min": {"before": 2.0, "after": 2.0}, "others_cpu_share": share}}}
        )

    idle = SimpleNamespace(main={("math", 0.0): result(0.02)}, sweeps={("math", "alpha", 1.0): result(0.1)})
    busy = SimpleNamespace(main={("math", 0.0): result(0.02)}, sweeps={("math", "alpha", 1.0): result(0.6)})
    assert report_md.busy_warning(idle) == []
    assert (
        "during 1 of 2 runs they used more than 25% of the machine's CPU time (up to 60%)"
        in report_md.busy_warning(busy)[0]
    )


def test_the_share_of_other_processes_leaves_this_process_out():
    """others_share: the machine's busy seconds minus this process's, over all CPU seconds."""
    assert provenance.others_share((10.0, 100.0, 4.0), (18.0, 120.0, 10.0)) == pytest.approx(0.1)
    assert provenance.others_share(None, (1.0, 2.0, 0.0)) is None
    start = provenance.cpu_clock()
    assert start is not None and start[0] <= start[1]  # Linux has /proc/stat; busy time within all time
    sum(i * i for i in range(2_000_000))  # a reading across this process's own work
    end = provenance.cpu_clock()
    assert end[2] > start[2] and 0.0 <= provenance.others_share(start, end) <= 1.0
    # a child process's finished work is this process's own (a report's worker pool), not another load
    import subprocess
    import sys

    before = provenance.cpu_clock()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    after = provenance.cpu_clock()
    assert after[2] - before[2] >= 0.05  # the child's CPU seconds were counted as this process's


def test_pooled_intervals_resample_within_each_suite():
    """Stratified: a resample keeps each suite's prompt count, so a fast and a slow suite pooled
    give a narrower interval than resampling prompts across suites, around the same ratio."""
    from libraspec.experiments.stats import resample_indices, speedup_interval

    strata = ["a"] * 4 + ["b"] * 6
    draws = resample_indices(strata, 500, 0)
    assert draws.shape == (500, 10)
    assert (draws[:, :4] < 4).all() and (draws[:, 4:] >= 4).all()
    rows = [
        {"tokens": 10, "wall_s": 1.0 if s == "a" else 4.0 + 0.1 * i, "ar_tokens": 10, "ar_wall_s": 4.0}
        for i, s in enumerate(strata)
    ]
    plain, stratified = speedup_interval(rows, "wall_s"), speedup_interval(rows, "wall_s", strata=strata)
    assert stratified[1] - stratified[0] < 0.5 * (plain[1] - plain[0])
    point = 40.0 / sum(r["wall_s"] for r in rows) * 10 / 10
    assert stratified[0] <= point <= stratified[1]
    with pytest.raises(ValueError, match="one label per prompt"):
        speedup_interval(rows, "wall_s", strata=strata[:3])


def test_the_papers_figures_are_typed_once_as_data():
    """Issue 44: the paper's numbers live once (experiments/paper.py, each with where it stands in
    the paper); the report reads them, and no other library module types one."""
    import re
    from pathlib import Path

    from libraspec.experiments.paper import REPORTED, Reported

    assert Reported(8.49, 8.49, "x", "abstract").span() == "8.49x"
    assert Reported(0.39, 0.69, "x", "Table 2").span() == "0.39-0.69x"
    assert Reported(2.78, 2.78, "tokens", "4.7").span() == "2.78 tokens"
    assert Reported(2.0, 2.2, "", "Table 4", digits=1).span() == "2.0-2.2"  # the paper's digits
    assert all(r.where and r.low <= r.high for r in REPORTED.values())
    package = Path(__file__).resolve().parents[1] / "libraspec"
    # each figure as the report writes it ("8.49", "0.39-0.69"): a bare 0.5 or 24 is no paper figure
    figures = {r.span().removesuffix("x").removesuffix(" tokens") for r in REPORTED.values() if r.unit}
    typed = [
        (path.name, figure)
        for path in package.rglob("*.py")
        if path.name != "paper.py"
        for figure in figures
        if re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d])", path.read_text())
    ]
    assert typed == [], f"paper figures typed outside paper.py: {typed}"


def test_goals_are_judged_in_stats_and_worded_from_their_thresholds(monkeypatch):
    """Issue 44: verdicts are computed apart from prose (`stats.goals`, `stats.goal_met`), and the
    report's words carry each goal's threshold from `stats.GOALS`, so the two cannot disagree."""
    modes = {
        "libraspec": {"mode": "libraspec", "speedup_modeled": 1.2, "speedup_measured": 1.1, "mad_vs_oracle": 1.0}
        | {"policy_share": 0.001},
        "oracle": {"mode": "oracle", "speedup_modeled": 1.3},
        "static": {"mode": "static", "speedup_modeled": 1.0, "mad_vs_oracle": 4.0, "length": 7, "best": True},
    }
    judged = {g.key: g for g in stats.goals(modes)}
    assert judged["measured"].met is False and judged["mad"].met is True and judged["static_ratio"].against == "static"
    assert stats.goal_met([True, True]) is True and stats.goal_met([True, False]) is False
    assert stats.goal_met([None, None]) is None and stats.goal_met([True, None]) is False
    monkeypatch.setitem(stats.GOALS, "measured", 1.1)
    row = next(r for r in report_md.goal_rows(modes) if r[0].startswith("measured"))
    assert row == ["measured speedup over AR >= 1.1x", "1.10x", "**met**"]


def test_round_records_are_written_compressed_and_read_back_the_same(tmp_path):
    """Committed round records are zstd without dictionaries (a third smaller than snappy; the repository
    must fit a device call) and read back exactly as written."""
    import pyarrow.parquet as pq

    frame = records_to_frame(ROUNDS)
    path = write_parquet(frame, str(tmp_path / "r.parquet"))
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
    back = read_trace(path)
    assert back.columns.tolist() == frame.columns.tolist()
    again = read_trace(write_parquet(back, str(tmp_path / "again.parquet")))
    pd.testing.assert_frame_equal(again, back)  # NaN (no oracle length) compares equal here
    assert [list(x) for x in back["committed_tokens"]] == [list(x) for x in frame["committed_tokens"]]


def test_the_pooled_speedup_is_a_ratio_of_sums():
    """`stats.pooled_speedup`, the one pooled speedup of grids, Table 1 and the replay report: AR's
    seconds per token over the mode's, each summed over prompts (not a mean of per-prompt ratios)."""
    rows = [
        {"tokens": 10, "modeled_s": 1.0, "ar_tokens": 10, "ar_modeled_s": 2.0},  # 2x on its own
        {"tokens": 30, "modeled_s": 6.0, "ar_tokens": 30, "ar_modeled_s": 6.0},  # 1x on its own
    ]
    assert stats.pooled_speedup(rows, "modeled_s") == pytest.approx((8.0 / 40) / (7.0 / 40))  # 1.143, not 1.5
