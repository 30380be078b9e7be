"""Golden round records: a fixed set of runs whose records (timings aside) must never change.

`python tests/golden.py` rewrites tests/golden/*.json from the current code; do that only when
a change of behaviour is intended and say so in the commit. `test_golden.py` compares.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import torch

from libraspec.cost import LatencyProfile
from libraspec.engine import DecodeConfig, SpeculativeDecoder
from libraspec.modes import make_policy
from libraspec.policy import LibraSpecPolicy
from libraspec.serving.vllm import BatchSchedulePolicy, OnlineCalibration, VLLMAdaptivePolicy

FOLDER = Path(__file__).resolve().parent / "golden"
TIMING = ("draft_s", "policy_s", "verify_s", "cumulative_s")  # wall clock: never compared
# the fields every golden file holds; fields added to RoundRecord later are not compared
FIELDS = (
    "mode",
    "round_index",
    "start_position",
    "draft_tokens",
    "confidences",
    "blocks_drafted",
    "policy_steps",
    "eps_bounds",
    "chosen_length",
    "accepted",
    "committed_tokens",
    "bonus_token",
    "oracle_length",
    "modeled_s",
    "cumulative_tokens",
    "cumulative_modeled_s",
    "finished",
)
# held by the look-up, hybrid and tree runs, which were added later (tests/test_golden.py compares
# the fields a stored run holds)
TREE_FIELDS = ("tree_size", "tree_tokens", "tree_parents", "tree_path", "draft_sources")
PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=70)
MODES = {  # label -> (mode, policy settings)
    "ar": ("ar", None),
    "oracle": ("oracle", None),
    "static-3": ("static", {"static_length": 3}),
    "static-7": ("static", {"static_length": 7}),
    "libraspec": ("libraspec", {"alpha": 2.2, "d_max": 20}),
    "g4": ("g4", {"static_length": 4, "d_max": 20}),
    "failfast": ("failfast", {"failfast_threshold": 0.2, "failfast_step": 3, "d_max": 20}),
}
TREES = {
    "ddtree": ("ddtree", {"tree_depth": 7, "node_budget": 16}),
    "ddtree-libraspec": ("ddtree-libraspec", {"alpha": 2.2, "d_max": 20, "node_budget": 16}),
    # added later still: the trees whose policies choose the nodes themselves
    "ddtree-marginal": ("ddtree-marginal", {"alpha": 2.2, "d_max": 20, "node_budget": 16}),
    "ddtree-priced": ("ddtree-priced", {"d_max": 20, "node_budget": 16}),
}
# added later: LibraSpec with alpha from the price list (libraspec/priced.py), each round's alpha kept
PRICED = {"libraspec-priced": ("libraspec-priced", {"d_max": 20})}
PRICED_FIELDS = FIELDS + TREE_FIELDS + ("alpha",)
# added later: the serving engines' rules (libraspec/serving/) at their sources' defaults (`serving_runs`)
SERVING = {
    "sglang-adaptive": ("sglang-adaptive", {"d_max": 20}),
    "hf-threshold": ("hf-threshold", {"d_max": 20}),
}

# added later: vLLM's rules, each built here (mode, policy maker)
VLLM_SCHEDULE = {"ranges": [[1, 1, 5], [2, 8, 3]]}
VLLM = {
    "vllm-adaptive": ("vllm-adaptive", lambda: VLLMAdaptivePolicy(PROFILE, 20)),
    "vllm-schedule": ("vllm-schedule", lambda: BatchSchedulePolicy(VLLM_SCHEDULE, 1, 20)),
    "libraspec-calibrated": ("libraspec", lambda: OnlineCalibration(LibraSpecPolicy(2.2, 20), refit_every=8)),
}


def record_dict(record, fields=FIELDS) -> dict:
    row = dataclasses.asdict(record)
    row = {key: row[key] for key in fields}
    for key in set(TREE_FIELDS) & set(fields):
        row[key] = row[key] if key == "tree_size" else list(row[key])
    row["policy_steps"] = [list(step.values()) for step in row["policy_steps"]]
    row["draft_tokens"], row["committed_tokens"] = list(row["draft_tokens"]), list(row["committed_tokens"])
    row["confidences"] = [round(q, 9) for q in row["confidences"]]
    row["eps_bounds"] = list(row["eps_bounds"])
    for key in ("modeled_s", "cumulative_modeled_s"):
        row[key] = round(row[key], 9)
    if row.get("alpha") is not None:
        row["alpha"] = round(row["alpha"], 9)
    return row


def decode_with(decoder, prompt, mode, policy, config, fields=FIELDS + TREE_FIELDS) -> list[dict]:
    return [record_dict(r, fields) for r in decoder.run(prompt, mode, policy, config)]


def decode(decoder, prompt, label, config, fields=FIELDS) -> list[dict]:
    mode, settings = {**MODES, **TREES, **PRICED, **SERVING}[label]
    policy = None if settings is None else make_policy(mode, decoder.n, profile=decoder.profile, **settings)
    return [record_dict(r, fields) for r in decoder.run(prompt, mode, policy, config)]


def tiny_runs() -> dict:
    """Tiny Llama with its random drafter, a partly right drafter and a right one; greedy and sampled."""
    import dataclasses as dc

    from fake_drafters import GreedyOracleDrafter

    from libraspec.models.registry import tiny_pair

    pair = tiny_pair("llama", seed=3, dtype=torch.float64)
    drafters = {
        "random": pair.drafter,
        "right2": GreedyOracleDrafter(pair.target, block_size=8, right_for=2, confidence=0.7),
        "right": GreedyOracleDrafter(pair.target, block_size=8, confidence=0.9),
    }
    gen = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, 259, (k,), generator=gen).tolist() for k in (5, 12)]
    out = {}
    for name, drafter in drafters.items():
        decoder = SpeculativeDecoder(dc.replace(pair, drafter=drafter), PROFILE)
        for temperature in (0.0, 1.0):
            config = DecodeConfig(
                max_new_tokens=24, temperature=temperature, seed=4, lookahead=20, annotate_oracle=True
            )
            for p, prompt in enumerate(prompts):
                for label in MODES:
                    out[f"{name}/T{temperature:g}/p{p}/{label}"] = decode(decoder, prompt, label, config)
    # added later, with the tree fields: draft trees on the random and the partly right drafter,
    # look-up and hybrid drafting on a prompt that repeats itself, every chain mode
    fields = FIELDS + TREE_FIELDS
    repeating = [7, 40, 41, 42, 43, 44, 7, 40, 41, 42, 43, 44, 7, 40]
    for temperature in (0.0, 1.0):
        config = DecodeConfig(max_new_tokens=24, temperature=temperature, seed=4, lookahead=20, annotate_oracle=True)
        for name in ("random", "right2"):
            decoder = SpeculativeDecoder(dc.replace(pair, drafter=drafters[name]), PROFILE)
            for label in TREES:
                out[f"{name}/T{temperature:g}/p0/{label}"] = decode(decoder, prompts[0], label, config, fields)
        for name in ("lookup", "hybrid"):
            decoder = SpeculativeDecoder(pair, PROFILE, drafter=name)
            for label in MODES:
                out[f"{name}/T{temperature:g}/repeat/{label}"] = decode(decoder, repeating, label, config, fields)
    # added later still: libraspec-priced on the random, the partly right and the right drafter and on
    # look-up and hybrid drafting, greedy and sampled, with the alpha each round derived
    for temperature in (0.0, 1.0):
        config = DecodeConfig(max_new_tokens=24, temperature=temperature, seed=4, lookahead=20, annotate_oracle=True)
        for name in ("random", "right2", "right"):
            decoder = SpeculativeDecoder(dc.replace(pair, drafter=drafters[name]), PROFILE)
            for label in PRICED:
                out[f"{name}/T{temperature:g}/p0/{label}"] = decode(decoder, prompts[0], label, config, PRICED_FIELDS)
        for name in ("lookup", "hybrid"):
            decoder = SpeculativeDecoder(pair, PROFILE, drafter=name)
            for label in PRICED:
                key = f"{name}/T{temperature:g}/repeat/{label}"
                out[key] = decode(decoder, repeating, label, config, PRICED_FIELDS)
    # added later still: vLLM's rules (libraspec/serving/vllm.py) on the same drafters and prompts: the
    # per-request adaptive verification, the schedule with a table of its own (VLLM_SCHEDULE: the
    # shipped table is chosen again by benchmarks/batch_schedule.py) and LibraSpec with vLLM's online
    # calibration refitted every 8 pairs
    for temperature in (0.0, 1.0):
        config = DecodeConfig(max_new_tokens=24, temperature=temperature, seed=4, lookahead=20, annotate_oracle=True)
        for name in ("random", "right2", "right"):
            decoder = SpeculativeDecoder(dc.replace(pair, drafter=drafters[name]), PROFILE)
            for label, (mode, make) in VLLM.items():
                out[f"{name}/T{temperature:g}/p0/{label}"] = decode_with(decoder, prompts[0], mode, make(), config)
        for name in ("lookup", "hybrid"):
            decoder = SpeculativeDecoder(pair, PROFILE, drafter=name)
            for label, (mode, make) in VLLM.items():
                out[f"{name}/T{temperature:g}/repeat/{label}"] = decode_with(decoder, repeating, mode, make(), config)
    out.update(serving_runs(pair, drafters, prompts[0], repeating))
    return out


def serving_runs(pair, drafters: dict, prompt: list[int], repeating: list[int]) -> dict:
    """SGLang's adaptive steps and transformers' threshold, greedy and sampled: on the random drafter
    (SGLang's tier falls from 3 to 1 after its warm-up), the right one (sampled, transformers' threshold
    is re-fitted from its ROC) and look-up; 80 greedy tokens on the right drafter take SGLang's tier to 7."""
    fields = FIELDS + TREE_FIELDS
    out = {}
    for temperature in (0.0, 1.0):
        config = DecodeConfig(max_new_tokens=24, temperature=temperature, seed=4, lookahead=20, annotate_oracle=True)
        for name in ("random", "right"):
            decoder = SpeculativeDecoder(dataclasses.replace(pair, drafter=drafters[name]), PROFILE)
            for label in SERVING:
                out[f"{name}/T{temperature:g}/p0/{label}"] = decode(decoder, prompt, label, config, fields)
        decoder = SpeculativeDecoder(pair, PROFILE, drafter="lookup")
        for label in SERVING:
            out[f"lookup/T{temperature:g}/repeat/{label}"] = decode(decoder, repeating, label, config, fields)
    decoder = SpeculativeDecoder(dataclasses.replace(pair, drafter=drafters["right"]), PROFILE)
    config = DecodeConfig(max_new_tokens=80, temperature=0.0, seed=4, lookahead=20, annotate_oracle=True)
    out["right/T0/p0-80/sglang-adaptive"] = decode(decoder, prompt, "sglang-adaptive", config, fields)
    return out


def embedded_runs() -> dict:
    """The embedded SmolLM2 pair with its shipped drafter, greedy and sampled."""
    from libraspec.models.registry import load_pair

    pair = load_pair("smollm2-135m")
    decoder = SpeculativeDecoder(pair, PROFILE, drafter="dflash")
    prompt = pair.encode_prompt("Write a Python function that returns the sum of a list of numbers.")
    out = {}
    for temperature in (0.0, 1.0):
        config = DecodeConfig(max_new_tokens=16, temperature=temperature, seed=2, lookahead=20, annotate_oracle=True)
        for label in ("ar", "oracle", "static-7", "libraspec", "g4", "failfast"):
            out[f"T{temperature:g}/{label}"] = decode(decoder, prompt, label, config)
    return out


def load(name: str) -> dict:
    return json.loads((FOLDER / f"{name}.json").read_text())


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    FOLDER.mkdir(exist_ok=True)
    # `python tests/golden.py tiny` rewrites one file; existing runs keep their stored fields
    names = sys.argv[1:] or ["tiny", "embedded"]
    for name, build in (("tiny", tiny_runs), ("embedded", embedded_runs)):
        if name in names:
            (FOLDER / f"{name}.json").write_text(json.dumps(build(), separators=(",", ":")) + "\n")
