"""Benchmark CLI and report: the OUT.json contract, greedy losslessness across modes, prompt
files of every shape, clear errors naming file and line, and the report end to end."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from libraspec import paths
from libraspec.__main__ import SUBCOMMANDS, build_parser, main
from libraspec.analysis import calibration
from libraspec.cost import LatencyProfile
from libraspec.experiments import bench, report, report_md
from libraspec.models.registry import tiny_pair
from libraspec.modes import MODES
from libraspec.paths import PROMPTS_DIR, read_prompts
from libraspec.records import RoundRecord, read_trace

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=50)
ALL = "ar,static,libraspec,g4,failfast,oracle"
MODE_KEYS = {
    "tokens",
    "rounds",
    "prompts",
    "tau",
    "wall_s",
    "speedup_measured",
    "speedup_modeled",
    "speedup_measured_ci",
    "speedup_modeled_ci",
    "mad_vs_oracle",
    "policy_s",
    "policy_share",
    "regime",
    "per_prompt",
}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def prompt_file(tmp_path):
    return write_lines(
        tmp_path / "p.jsonl",
        [
            json.dumps({"prompt": "Add 2 and 3."}),
            "",
            json.dumps({"question": "Why is ice slippery?"}),
            json.dumps({"turns": ["Say hello.", "Now goodbye."]}),
            json.dumps({"problem": "Solve x + 1 = 3.", "solution": "x = 2"}),
        ],
    )


@pytest.fixture
def fixed_profile(monkeypatch, tmp_path):
    """No profile measurement in tests: every run uses PROFILE (n = 7, as tiny pairs have)."""
    monkeypatch.setenv("LIBRASPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(bench, "bench_profile", lambda pair, spec: PROFILE)
    monkeypatch.setattr(report, "profile_reaching", lambda pair, d_max, **kwargs: PROFILE)


def test_prompt_shapes(prompt_file):
    assert read_prompts(prompt_file) == ["Add 2 and 3.", "Why is ice slippery?", "Say hello.", "Solve x + 1 = 3."]


@pytest.mark.parametrize(
    "line",
    [
        "{not json",
        json.dumps(["a list"]),
        json.dumps({"text": "no known key"}),
        json.dumps({"turns": []}),
        json.dumps({"turns": [3]}),
        json.dumps({"prompt": "   "}),
        json.dumps({"question": 7}),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, line):
    path = write_lines(tmp_path / "bad.jsonl", [json.dumps({"prompt": "fine"}), "", line])
    with pytest.raises(ValueError, match=r"bad\.jsonl, line 3"):
        read_prompts(path)


def test_empty_prompt_file(tmp_path):
    with pytest.raises(ValueError, match="no prompts"):
        read_prompts(write_lines(tmp_path / "empty.jsonl", [""]))


def test_every_suite_parses():
    for suite in report.SUITES:
        prompts = read_prompts(PROMPTS_DIR / f"{suite}.jsonl")
        assert len(prompts) >= 20 and len(set(prompts)) == len(prompts)


def test_public_suites_are_read_from_the_shared_data_folder(tmp_path):
    """Public prompt sets are never copied in: a suite names its file in the data folder, and a
    missing folder gives a clear error."""
    with pytest.raises(FileNotFoundError, match="never copied in"):
        paths.suite_path("gsm8k", data=tmp_path)
    (tmp_path / paths.PUBLIC_SUITES["math500"]).write_text(json.dumps({"problem": "What is 2 + 2?"}) + "\n")
    assert read_prompts(paths.suite_path("math500", data=tmp_path)) == ["What is 2 + 2?"]
    with pytest.raises(FileNotFoundError, match="public suites: gsm8k"):
        paths.suite_path("poetry")


def test_bench_cli_writes_the_contract(tmp_path, prompt_file, fixed_profile):
    out = tmp_path / "out" / "OUT.json"
    code = main(
        [
            "bench",
            "--prompts",
            str(prompt_file),
            "--modes",
            ALL,
            "--static-lengths",
            "2,7",
            "--max-new-tokens",
            "8",
            "--model",
            "tiny-llama",
            "--threads",
            "1",
            "--quiet",
            "--limit",
            "2",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert set(data) == {"config", "modes", "runs"}
    config = data["config"]
    for key in (
        "models",
        "alpha",
        "d_max",
        "n",
        "static_length",
        "static_lengths",
        "profile",
        "machine",
        "threads",
        "versions",
        "provenance",
        "bootstrap",
    ):
        assert key in config
    assert config["n"] == 7 and config["static_lengths"] == [2, 7] and config["threads"] == 1
    assert LatencyProfile.from_dict(config["profile"]) == PROFILE
    labels = ["ar", "static-2", "static-7", "libraspec", "g4", "failfast", "oracle"]
    assert list(data["modes"]) == labels
    for label, entry in data["modes"].items():
        assert MODE_KEYS <= set(entry)
        assert isinstance(entry["tokens"], int) and isinstance(entry["rounds"], int)
        assert entry["tokens"] >= entry["rounds"] >= 1 and entry["wall_s"] > 0
        assert (entry["mad_vs_oracle"] is None) == (label in ("ar", "oracle"))
        assert (entry["regime"] is None) == (label in ("ar", "oracle")) and len(entry["per_prompt"]) == 2
        assert 0.0 <= entry["policy_share"] <= 1.0
    assert data["modes"]["ar"]["speedup_measured"] == pytest.approx(1.0)
    assert sum(data["modes"][k].get("best", False) for k in labels) == 1
    assert config["best_static"] in ("static-2", "static-7")
    # one run per (prompt, mode), with ids and text
    runs = data["runs"]
    assert sorted((r["prompt_index"], r["mode"]) for r in runs) == sorted((i, k) for i in range(2) for k in labels)
    for run in runs:
        assert isinstance(run["text"], str) and all(isinstance(t, int) for t in run["output_ids"])
        assert 1 <= len(run["output_ids"]) <= 8
    # greedy: every mode reproduces AR token for token
    ar = {r["prompt_index"]: r["output_ids"] for r in runs if r["mode"] == "ar"}
    assert all(r["output_ids"] == ar[r["prompt_index"]] for r in runs)
    # the per-round records of every run sit beside the JSON
    frame = read_trace(str(out.with_suffix("")) + ".records.parquet")
    assert {"label", "prompt_index"} <= set(frame.columns)
    for label, entry in data["modes"].items():
        rows = frame[frame["label"] == label]
        assert len(rows) == entry["rounds"] and rows["tau"].sum() == entry["tokens"]
    assert not list(out.parent.glob("*.tmp"))


def test_speedups_are_totals_over_prompts(tmp_path, prompt_file, fixed_profile):
    pair = tiny_pair("llama", seed=5, dtype=torch.float64)
    spec = bench.BenchSpec(modes=("ar", "static", "libraspec"), max_new_tokens=10, temperature=1.0, seed=3)
    result = bench.run_bench(pair, read_prompts(prompt_file), spec, profile=PROFILE)
    modes = result.summary["modes"]
    ar_rate = modes["ar"]["wall_s"] / modes["ar"]["tokens"]
    for label in ("static", "libraspec"):
        records = [r for run in result.records[label] for r in run]
        tokens = sum(r.tau for r in records)
        assert modes[label]["tokens"] == tokens
        assert modes[label]["speedup_measured"] == pytest.approx(ar_rate / (modes[label]["wall_s"] / tokens))
        modeled = sum(r.modeled_s for r in records)
        assert modes[label]["speedup_modeled"] == pytest.approx(PROFILE.ar_token_time() * tokens / modeled)


def test_greedy_lossless_every_mode_float64(prompt_file):
    pair = tiny_pair("qwen3", seed=2, dtype=torch.float64)
    spec = bench.BenchSpec(
        modes=(*ALL.split(","), "ddtree", "ddtree-libraspec"), max_new_tokens=10, static_lengths=(1, 3, 9), d_max=16
    )
    result = bench.run_bench(pair, read_prompts(prompt_file)[1:3], spec, profile=PROFILE)
    ar = {r["prompt_index"]: r["output_ids"] for r in result.summary["runs"] if r["mode"] == "ar"}
    assert len(result.summary["runs"]) == 2 * 10
    assert all(r["output_ids"] == ar[r["prompt_index"]] for r in result.summary["runs"])


def test_annotation_subset(prompt_file):
    spec = bench.BenchSpec(modes=("ar", "static", "libraspec"), max_new_tokens=6, annotate=("libraspec",))
    result = bench.run_bench(tiny_pair("llama"), read_prompts(prompt_file)[:1], spec, profile=PROFILE)
    modes = result.summary["modes"]
    assert modes["static"]["mad_vs_oracle"] is None and modes["libraspec"]["mad_vs_oracle"] is not None
    assert all(r.oracle_length is None for r in result.records["static"][0])
    assert result.summary["config"]["oracle_annotation"] == ["libraspec"]
    with pytest.raises(ValueError, match="only policy and tree modes"):
        bench.BenchSpec(annotate=("ar",))


def test_tree_modes_with_several_node_budgets(prompt_file):
    """--node-budget 2,12: one label per mode and budget, each with its own trees, its tree
    statistics and (annotated) the hindsight depth and size; outputs equal AR."""
    pair = tiny_pair("llama", seed=2, dtype=torch.float64)
    spec = bench.BenchSpec(
        modes=("ar", "ddtree", "ddtree-libraspec"),
        max_new_tokens=10,
        node_budgets=(2, 12),
        d_max=16,
        annotate=("ddtree-libraspec",),
    )
    result = bench.run_bench(pair, read_prompts(prompt_file)[:2], spec, profile=PROFILE)
    modes = result.summary["modes"]
    assert set(modes) == {"ar", "ddtree-b2", "ddtree-b12", "ddtree-libraspec-b2", "ddtree-libraspec-b12"}
    for label, budget in (("ddtree-b2", 2), ("ddtree-b12", 12), ("ddtree-libraspec-b12", 12)):
        sizes = [r.tree_size for run in result.records[label] for r in run]
        assert max(sizes) == budget and modes[label]["mean_tree_size"] == pytest.approx(sum(sizes) / len(sizes))
    assert modes["ddtree-b12"]["mean_oracle_tree_size"] is None
    runs = result.records["ddtree-libraspec-b12"]
    assert all(r.oracle_length is not None for run in runs for r in run[:-1])
    judged = [r for run in runs for r in run if r.oracle_length is not None]
    assert modes["ddtree-libraspec-b12"]["mad_vs_oracle"] == pytest.approx(
        sum(abs(r.chosen_length - r.oracle_length) for r in judged) / len(judged)
    )
    ar = {r["prompt_index"]: r["output_ids"] for r in result.summary["runs"] if r["mode"] == "ar"}
    assert all(r["output_ids"] == ar[r["prompt_index"]] for r in result.summary["runs"])
    with pytest.raises(ValueError, match="node budgets"):
        bench.BenchSpec(node_budgets=(4, 4))


def test_bad_arguments_exit_with_a_message(tmp_path, prompt_file, capsys):
    for extra in (["--modes", "ar,warp"], ["--static-lengths", "4,x"], ["--limit", "0"]):
        with pytest.raises(SystemExit) as err:
            main(
                [
                    "bench",
                    "--prompts",
                    str(prompt_file),
                    "--model",
                    "tiny-llama",
                    "--quiet",
                    "--out",
                    str(tmp_path / "o.json"),
                ]
                + extra
            )
        assert err.value.code == 2
    assert "warp" in capsys.readouterr().err
    short = bench.BenchSpec(modes=("libraspec",), d_max=3, max_new_tokens=2)  # LibraSpec needs d_max >= n: raised
    clamped = bench.run_bench(tiny_pair("llama"), ["hi"], short, profile=PROFILE).summary["config"]["clamped"]
    assert clamped == ["d_max 3 -> 7 (allowed 7..510)"]
    assert not (tmp_path / "o.json").exists()


def test_subcommands_are_registered():
    parser = build_parser()
    assert {"bench", "report"} <= set(SUBCOMMANDS)
    args = parser.parse_args(["report", "--quick"])
    assert args.handler is report.run and args.quick


def record(d: int, a: int, q: float = 0.5) -> RoundRecord:
    committed = tuple(range(a + 1))
    return RoundRecord(
        mode="static",
        round_index=0,
        start_position=5,
        draft_tokens=tuple(range(7)),
        confidences=(q,) * 7,
        blocks_drafted=1,
        policy_steps=(),
        eps_bounds=(),
        chosen_length=d,
        accepted=a,
        committed_tokens=committed,
        bonus_token=a,
        oracle_length=d,
        draft_s=0.01,
        policy_s=0.0,
        verify_s=0.05,
        modeled_s=0.06,
        cumulative_tokens=a + 1,
        cumulative_s=0.06,
        cumulative_modeled_s=0.06,
    )


def test_acceptance_counts_only_reachable_drafts():
    """d = 4, a = 2: drafts 1-2 accepted, 3 counted as rejected, 4 never reached."""
    oracle = dataclasses.replace(record(7, 0), mode="oracle")
    result = bench.BenchResult({}, {"static": [[record(4, 2), record(2, 2)]], "oracle": [[oracle]]})
    data = SimpleNamespace(plan=report.ReportPlan(suites=("math",)), main={("math", 0.0): result}, profile=PROFILE)
    samples = report_md.acceptance_evidence(data)
    by_position = calibration.acceptance_by_position(samples)
    assert by_position["position"].tolist() == [1, 2, 3] and by_position["count"].tolist() == [2, 2, 1]
    assert by_position["acceptance"].tolist() == [1.0, 1.0, 0.0]
    assert len(samples) == 5 and samples["accepted"].mean() == pytest.approx(4 / 5)
    # p = (1, 1, 0) and p = 0 where unseen: tau at d = n = 7 is 1 + 1 + 1 = 3 (theory.expected_tau_curve)
    text = "\n".join(report_md._limits(data, {}, samples))
    assert "commits about 3.00 tokens" in text and "acceptance rate of 0.80" in text


def test_goals_verdicts():
    def entry(mode, modeled, measured=None, mad=None, share=0.0, length=None, best=False):
        out = {
            "mode": mode,
            "speedup_modeled": modeled,
            "speedup_measured": measured,
            "mad_vs_oracle": mad,
            "policy_share": share,
            "tokens_per_s": measured,
        }
        return out | ({"length": length, "best": best} if mode == "static" else {})

    good = {
        "static-8": entry("static", 1.5, 1.5, 5.0, length=8, best=True),
        "libraspec": entry("libraspec", 2.0, 2.5, 1.0, 0.001),
        "oracle": entry("oracle", 2.1),
    }
    assert [row[2] for row in report_md.goal_rows(good)] == ["**met**"] * 6
    bad = dict(good, libraspec=entry("libraspec", 1.2, 1.1, 2.5, 0.05))
    assert [row[2] for row in report_md.goal_rows(bad)] == ["**not met**"] * 6


def test_estimate_grows_with_the_plan():
    quick, full = report.QUICK, report.DEFAULT
    low, high = report.estimate_seconds(quick, PROFILE, 7)
    assert 0 < low < high
    assert report.estimate_seconds(full, PROFILE, 7)[0] > low


def test_a_report_plan_is_clamped_as_any_run_and_says_each_change_once():
    """`ReportPlan.checked`: every run's knobs by `BenchSpec.checked`, the sensitivity grids by
    `checked_grid`; a d_max below n becomes n with a note (the plan dropped it silently)."""
    plan = dataclasses.replace(
        report.QUICK, alpha=1000.0, temperatures=(0.0, 9.0), d_maxes=(4, 24, 60), node_budgets=(0, 16)
    )
    fixed, notes = plan.checked(7, context=512)
    assert (fixed.alpha, fixed.temperatures, fixed.d_maxes, fixed.node_budgets) == (
        64.0,
        (0.0, 4.0),
        (7, 24, 60),
        (1, 16),
    )
    assert notes == [
        "alpha 1000 -> 64 (allowed 0.05..64)",
        "node budget 0 -> 1 (allowed 1..510)",
        "temperature 9 -> 4 (allowed 0..4)",
        "d_max 4 -> 7 (allowed 7..510)",
    ]
    assert [value for kind, value, _ in fixed.sweep_specs(7) if kind == "d_max"] == [7, 60]
    assert report.QUICK.checked(7, context=512) == (report.QUICK, [])
    wide, notes = dataclasses.replace(report.QUICK, d_max=1000).checked(7, context=8192)
    assert wide.d_max == 512 and notes == ["d_max 1000 -> 512 (allowed 7..512)"]  # the default lengths follow it
    # the d_max probe's other fields are RunSpec's defaults: its max-new-tokens note (128 -> 111) is not the plan's
    assert dataclasses.replace(report.QUICK, d_max=400).checked(7, context=512)[1] == []
    with pytest.raises(ValueError, match="at least one temperature"):
        dataclasses.replace(report.QUICK, temperatures=()).checked(7)


def test_report_end_to_end(tmp_path, fixed_profile, monkeypatch, capsys):
    out = tmp_path / "BENCHMARKS.md"
    monkeypatch.setattr(report, "load_average", lambda: 3.0)  # a busy machine: the CLI warns before it starts
    code = main(
        [
            "report",
            "--out",
            str(out),
            "--quick",
            "--model",
            "tiny-llama",
            "--threads",
            "1",
            "--prompts-per-suite",
            "1",
            "--max-new-tokens",
            "6",
            "--alphas",
            "1.6,2.2,auto",
            "--d-maxes",
            "15,24",
            "--suites",
            "math,chat",
            "--figures",
            "html",
            "--quiet",
            "--note",
            "tiny test run",
        ]
    )
    assert code == 0
    assert "warning: the 1-minute load average is 3.00" in capsys.readouterr().err
    text = out.read_text()
    for heading in (
        "## Setup",
        "## Results per suite",
        "### math, temperature 0",
        "### chat, temperature 1",
        "## Pooled over suites",
        "## Alpha sensitivity",
        "## d_max sensitivity",
        "## Length trajectories",
        "## Regime of the rounds",
        "## MAD to the oracle length",
        "## Compared with the paper",
        "## Goals",
        "## What limits the speedup",
        "## Reproduce",
    ):
        assert heading in text, heading
    assert "tiny test run" in text and "--quick" in text
    lines = text.splitlines()
    headers = [line for line, below in zip(lines, lines[1:]) if below.startswith("|---")]
    assert len(headers) >= 8 and all("(quick: " in line.split("|")[1] for line in headers)
    assert "- LibraSpec, measured: " in text and "- Code: commit `" in text
    assert "- Files (sha256): none (random weights from a seed)" in text and "Load average (1 min) before the" in text
    for mode in ("AR", "static d=4", "LibraSpec", "G4", "FailFast", "oracle"):
        assert f"| {mode}" in text
    assert "**(best)**" in text
    assert "; G4 initial length 7; FailFast threshold 0.6, start and step 4;" in text
    assert "; FailFast (paper) threshold 0.45, start and step 10, d_max 60 (its d* and MAD" in text
    links = [line.split("](", 1)[1].rstrip(")") for line in text.splitlines() if "](" in line]
    assert len(links) == 3 and all((tmp_path / link).is_file() for link in links)
    results = tmp_path / "benchmarks" / "results"
    summary = json.loads((results / "chat-T1.json").read_text())
    # one prompt: each static length (9), FailFast with its paper's settings, and every other chain,
    # oracle and AR mode of the registry once (the serving engines' rules and LibraSpec priced included)
    runs = 9 + 1 + len(report.ALL_MODES) - 1
    assert summary["config"]["temperature"] == 1.0 and len(summary["runs"]) == runs == 20
    # the fair static grid 1..n, 2n and d_max (n = 7, d_max = 24), FailFast ours and the paper's
    assert summary["config"]["static_lengths"] == [1, 2, 3, 4, 5, 6, 7, 14, 24]
    assert {"failfast", "failfast-paper"} <= set(summary["modes"])
    assert summary["config"]["settings"]["failfast-paper"] == {
        "failfast_threshold": 0.45,
        "failfast_step": 10,
        "d_max": 60,
    }
    assert summary["config"]["settings"]["g4"] == {"g4_initial": 7, "d_max": 24}
    sweep = pd.read_parquet(results / "math-alpha1.6.records.parquet")
    assert set(sweep["label"]) == {"ar", "libraspec"}
    assert json.loads((results / "math-alphaauto.json").read_text())["config"]["alpha"] == "auto"
    assert "| auto |" in text and "| FailFast (paper) |" in text
    assert os.path.exists(results / "chat-d_max15.json")
    # chains against trees: one run per suite and temperature, on the block-diffusion drafter
    trees = json.loads((results / "math-trees-T0.json").read_text())
    assert trees["config"]["models"]["drafter"] == "dflash" and trees["config"]["node_budgets"] == [16, 32]
    assert set(trees["modes"]) == {
        "ar",
        "static",
        "libraspec",
        "ddtree-b16",
        "ddtree-b32",
        "ddtree-libraspec-b16",
        "ddtree-libraspec-b32",
        "ddtree-marginal-b16",
        "ddtree-marginal-b32",
        "ddtree-priced-b16",
        "ddtree-priced-b32",
    }
    assert all(
        r["output_ids"] == next(a["output_ids"] for a in trees["runs"] if a["mode"] == "ar") for r in trees["runs"]
    ) and os.path.exists(results / "chat-trees-T1.json")
    for heading in (
        "## Chains and draft trees",
        "### math, temperature 0 (trees)",
        "### pooled over suites, temperature 1 (trees)",
    ):
        assert heading in text, heading
    assert "| ddtree-libraspec-b32 |" in text and "- ddtree-b16: measured " in text
    assert "DDTree + LibraSpec: +0.39-0.69x" in text and "--node-budget 16,32" in text


def test_out_of_range_bench_settings_are_clamped_by_the_run_spec_and_said():
    """Bench takes RunSpec.checked's clamp, the app's: alpha 1000 -> 64, d_max 2 -> n, a static
    length below 1 -> 1 and beyond what the tiny target can verify -> context - 2, a node budget
    of 0 -> 1; the notes reach the summary."""
    spec = bench.BenchSpec(modes=("ar", "static", "libraspec"), alpha=1000.0, d_max=2, static_lengths=(-2, 3, 9999))
    pair = tiny_pair("llama")
    fixed, notes = spec.checked(pair.n, pair.target.max_positions, 5)
    assert (fixed.alpha, fixed.d_max, fixed.static_lengths) == (64.0, pair.n, (1, 3, pair.target.max_positions - 2))
    assert [note.split(" ->")[0] for note in notes] == [
        "alpha 1000",
        "d_max 2",
        "static length -2",
        "static length 9999",
    ]
    assert bench.BenchSpec(node_budgets=(0, 4)).checked(pair.n)[0].node_budgets == (1, 4)
    result = bench.run_bench(pair, ["Add 2 and 3."], dataclasses.replace(spec, max_new_tokens=4), profile=PROFILE)
    assert result.summary["config"]["alpha"] == 64.0 and result.summary["config"]["clamped"] == notes
    assert result.records["libraspec"][0][0].alpha == 64.0
    with pytest.raises(ValueError, match="d_max must be a number"):
        bench.BenchSpec(d_max="many")


def test_fair_grids():
    assert bench.static_grid(7, 24) == (1, 2, 3, 4, 5, 6, 7, 14, 24)
    assert bench.static_grid(4, 8) == (1, 2, 3, 4, 8)  # 2n = d_max once
    spec = bench.BenchSpec(modes=("ar", "failfast"), max_new_tokens=24, published=True, alpha="auto")
    assert spec.alpha == "auto" and spec.longest(7) == 60
    assert [label for label, _, _ in spec.labels(7)] == ["ar", "failfast", "failfast-paper"]
    with pytest.raises(ValueError, match="alpha"):
        bench.BenchSpec(alpha="fast")
    # the paper's FailFast starts at 10 drafts; a random drafter (q far below 0.45) never extends
    result = bench.run_bench(tiny_pair("llama"), ["Add 2 and 3."], spec, profile=PROFILE)
    first = {label: result.records[label][0][0].chosen_length for label in ("failfast", "failfast-paper")}
    assert first == {"failfast": 4, "failfast-paper": 10}  # later rounds are cut to the tokens left
    settings = result.summary["config"]["settings"]
    assert settings == {"ar": {}, "failfast": {"failfast_threshold": 0.6, "failfast_step": 4, "d_max": 24}} | {
        "failfast-paper": dict(MODES["failfast"].published)
    }
    assert bench.label_title("failfast-paper") == "FailFast (paper)"


def test_libraspec_starts_where_the_bench_says():
    """`--libraspec-start 10` (the paper's Fast-dLLM setting): line 4 starts at d = 10 on the tiny
    pair (n = 7), the knob is in the summary's settings, and a start past d_max is lowered to it."""
    spec = bench.BenchSpec(modes=("ar", "libraspec"), max_new_tokens=8, d_max=20, libraspec_start=10)
    result = bench.run_bench(tiny_pair("llama"), ["Add 2 and 3."], spec, profile=PROFILE)
    first = result.records["libraspec"][0][0]
    assert first.policy_steps[0].d_before == 10 and first.blocks_drafted >= 2
    assert result.summary["config"]["settings"]["libraspec"]["libraspec_start"] == 10
    fixed, notes = bench.BenchSpec(d_max=12, libraspec_start=30).checked(7)
    assert fixed.libraspec_start == 12 and notes == ["LibraSpec start 30 -> 12 (allowed 1..12)"]


def test_automatic_alpha_in_bench(prompt_file):
    spec = bench.BenchSpec(modes=("ar", "libraspec"), max_new_tokens=6, alpha="auto")
    result = bench.run_bench(tiny_pair("llama"), read_prompts(prompt_file)[:1], spec, profile=PROFILE)
    with pytest.raises(ValueError, match="ddtree-marginal"):  # no LibraSpec inside: refused before any loading
        bench.BenchSpec(modes=("ar", "ddtree-marginal"), alpha="auto")
    assert bench.BenchSpec(modes=("ddtree-libraspec", "static", "ddtree-priced"), alpha="auto").alpha == "auto"
    alphas = {r.alpha for r in result.records["libraspec"][0]}
    assert result.summary["config"]["alpha"] == "auto" and None not in alphas


def test_records_read_back_equal_the_written_ones(tmp_path, prompt_file):
    """`read_result` inverts `write_result`: every field of every round, trees and policy steps included."""
    pair = tiny_pair("llama", seed=2)
    spec = bench.BenchSpec(
        modes=("ar", "libraspec", "ddtree"), max_new_tokens=8, node_budgets=(4,), d_max=16, annotate=("libraspec",)
    )
    result = bench.run_bench(pair, read_prompts(prompt_file)[:2], spec, profile=PROFILE)
    bench.write_result(result, tmp_path / "r.json")
    again = bench.read_result(tmp_path / "r.json")
    assert again.summary["modes"].keys() == result.summary["modes"].keys()
    assert again.records == result.records
    for label, runs in result.records.items():  # types too: 5 and 5.0 compare equal, a record field does not
        for run, back in zip(runs, again.records[label]):
            for r, q in zip(run, back):
                for f in dataclasses.fields(r):
                    assert type(getattr(r, f.name)) is type(getattr(q, f.name)), (label, f.name)
    assert any(r.policy_steps for run in again.records["libraspec"] for r in run)
    assert any(r.tree_tokens for run in again.records["ddtree"] for r in run)


def test_report_resume_reads_back_only_unchanged_jobs(tmp_path, fixed_profile, monkeypatch):
    """--resume: a second invocation decodes nothing; a changed setting decodes again; a damaged or
    keyless result file is decoded again, never trusted."""
    args = [
        "report",
        "--out",
        str(tmp_path / "B.md"),
        "--quick",
        "--model",
        "tiny-llama",
        "--threads",
        "1",
        "--prompts-per-suite",
        "1",
        "--max-new-tokens",
        "4",
        "--alphas",
        "2.2",
        "--d-maxes",
        "24",
        "--suites",
        "math",
        "--temperatures",
        "0",
        "--figures",
        "html",
        "--quiet",
    ]
    calls = []
    honest = report.run_bench

    def counting(*a, **k):
        calls.append(1)
        return honest(*a, **k)

    monkeypatch.setattr(report, "run_bench", counting)
    assert main(args) == 0
    first = len(calls)
    results = tmp_path / "benchmarks" / "results"
    assert first == 2 and (results / "profile.json").exists()  # the main run and the tree run
    assert main(args + ["--resume"]) == 0 and len(calls) == first
    text = (tmp_path / "B.md").read_text()
    assert "2 of its runs were read back from an earlier invocation" in text
    (results / "math-T0.json").write_text("{")  # damaged: decoded again
    assert main(args + ["--resume"]) == 0 and len(calls) == first + 1
    longer = [("5" if before == "--max-new-tokens" else a) for before, a in zip([""] + args, args)]
    assert main(longer + ["--resume"]) == 0
    assert len(calls) == first + 3  # another setting: both jobs again


def test_resume_uses_a_saved_profile_only_from_the_same_pair_and_machine(tmp_path):
    from libraspec.profiling import machine_description

    pair = tiny_pair("llama")
    mine = dataclasses.replace(PROFILE, meta={"pair": pair.name, **machine_description()})
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(mine.to_dict()))
    assert report.saved_profile(path, pair, 24) == mine
    assert report.saved_profile(path, pair, 60) is None  # does not reach the longest length asked for
    for meta in ({**mine.meta, "pair": "tiny-qwen3"}, {**mine.meta, "cpu": "another CPU"}, {}):
        path.write_text(json.dumps(dataclasses.replace(mine, meta=meta).to_dict()))
        assert report.saved_profile(path, pair, 24) is None
    for damaged in ("{", "[1, 2]", '{"verify_s": []}'):
        path.write_text(damaged)
        assert report.saved_profile(path, pair, 24) is None
    (tmp_path / "r.json").write_text("[1]")  # valid JSON, not a result: no key, decoded again
    (tmp_path / "r.records.parquet").write_text("")
    assert report.stored_key(str(tmp_path / "r.json")) is None


def test_span_prints_one_value_when_both_ends_print_the_same():
    assert report_md._span([1.2, 0.8], "{:.0f}") == "1"  # BENCHMARKS.md once read "1-1%"
    assert report_md._span([0.4, 3.0], "{:.0f}") == "0-3"
    assert report_md._span([0.51, 0.512], "{:.2f}") == "0.51"


def test_table1_writes_its_own_section_of_benchmarks_md_and_the_report_keeps_it(tmp_path, monkeypatch):
    """benchmarks/table1.py rewrites only its section of BENCHMARKS.md (before "## Reproduce" the first
    time, in place after), and benchmarks/replay_report.py, which writes the rest, keeps it as it is."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import replay_report
    import table1

    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## Grid\n\nrows\n\n## Reproduce\n\nhow\n")
    table1.splice(path, table1.MARKERS[0] + "\n## Table 1\n\nfirst\n" + table1.MARKERS[1] + "\n")
    first = path.read_text()
    assert first.index("## Grid") < first.index("first") < first.index("## Reproduce") and first.endswith("how\n")
    table1.splice(path, table1.MARKERS[0] + "\n## Table 1\n\nsecond\n" + table1.MARKERS[1] + "\n")
    second = path.read_text()
    assert "first" not in second and second.count(table1.MARKERS[0]) == 1
    assert second.replace("second", "first") == first  # nothing else moved
    kept = replay_report.kept_table1(path)
    assert kept[0].startswith(table1.MARKERS[0]) and "second" in kept[0] and kept[0].endswith(table1.MARKERS[1])
    assert replay_report.kept_table1(tmp_path / "absent.md") == []


def test_table1_samples_every_policy_row_at_temperature_1_and_greedy_only_its_checks(monkeypatch):
    """The measured check decodes, greedy, each drafter's best static length and both LibraSpec rows; at
    temperature 1 (no replay models it) every policy row but the greedy notions (AR is the baseline, the
    oracle and the best schedule) with the static lengths SAMPLED_STATIC only; its table shows tau and no
    'equals AR' column (sampled texts are not AR's draw)."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import table1

    result = {"drafters": {"dflash": {"best_static": "static d=4"}, "eagle": {"best_static": "static d=3"}}}
    greedy = table1.measured_labels(result, 0.0)
    assert greedy["dflash"][0] == "static d=4" and greedy["eagle"][0] == "static d=3"
    assert [label.startswith("LibraSpec") for label in greedy["dflash"][1:]] == [True, True]
    sampled = table1.measured_labels(result, 1.0)["eagle"]
    labels = [config.label for config in table1.configs()]
    assert set(sampled) <= set(labels) and len(set(sampled)) == len(sampled)
    assert [label for label in sampled if label.startswith("static d=")] == [
        f"static d={d}" for d in table1.SAMPLED_STATIC
    ]
    left_out = {"AR", table1.grids.BEST} | {label for label in labels if label.startswith(("oracle", "static d="))}
    assert set(labels) - set(sampled) - left_out == set()  # FailFast (both), G4 and LibraSpec (both)
    assert not (set(sampled) & {"AR", table1.grids.BEST, "oracle d* per round"})

    cell = {"wall_s": {"speedup": 1.1, "interval": [1.0, 1.2]}, "modeled_s": {"speedup": 1.05, "interval": None}}
    meta = {"limit": 16, "max_new_tokens": 128, "drafter_id": "x", "profile": "p", "other_cpu": 0.01}
    text = table1.table(
        {
            "drafters": {},
            "measured": {"dflash": {"static d=4": {**cell, "tau": 1.43, "equals_ar": True, "replayed_rounds": [9, 9]}}},
            "sampled": {"dflash": {"G4": {**cell, "tau": 1.21, "equals_ar": None}}},
            "meta": {**meta, "measured_limit": 4},
        }
    )
    greedy_part, sampled_part = text.split("**Temperature 1, measured**")
    assert "| dflash | static d=4 | 1.100 (1.000-1.200) | 1.050 (nan-nan) | 1.43 | yes | 9/9 |" in greedy_part
    assert "| dflash | G4 | 1.100 (1.000-1.200) | 1.050 (nan-nan) | 1.21 |\n" in sampled_part
    assert "equals AR" not in sampled_part
