"""Fit the look-up drafter's confidence model: `python -m libraspec.drafters.lookup_fit`.

Data: greedy target outputs for training-template prompts (`train.prompts.training_prompts`,
never the held-out set, `assets/prompts` or the public suites in ../shared/data). At every
generated position the look-up drafter drafts up to `--depth` tokens from the sequence so far;
draft j is labelled accepted when it and every draft before it equal the target's greedy
tokens, and only drafts whose predecessors were accepted enter the fit, so q_j estimates
P(x_j accepted | x_1..x_{j-1} accepted), the quantity Algorithm 1's products assume.
A logistic model of those labels (Newton's method) becomes `assets/lookup_calibration.json`;
its reliability on a held-apart quarter of the prompts is stored with it.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from .lookup_corpus import fit_prompts
from .lookup import (DEFAULT_CALIBRATION, LookupCalibration, LookupDraft, SuffixIndex, feature_vector,
                     load_corpus)
from ..verify import SamplingConfig

UNFITTED = LookupCalibration.neutral()


def trajectory_samples(ids: list[int], prompt_len: int, depth: int,
                       corpus: SuffixIndex | None = None) -> tuple[list[tuple], list[int]]:
    """(features, accepted) of look-up drafts at every generated position of one greedy sequence."""
    features, labels = [], []
    index = SuffixIndex()
    index.append(ids[: prompt_len - 1])
    for t in range(prompt_len, len(ids)):  # the anchor is ids[t - 1]; the target then wrote ids[t:]
        draft = LookupDraft(index, ids[t - 1], depth, 1, SamplingConfig(), UNFITTED, corpus)
        draft.extend(1)
        truth = ids[t:t + depth]
        for j, feats in enumerate(draft.features[: len(truth)]):
            ok = draft.tokens[j] == truth[j]
            features.append(feats)
            labels.append(int(ok))
            if not ok:
                break
        index.append([ids[t - 1]])
    return features, labels


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-3, steps: int = 50) -> np.ndarray:
    """Weights of P(y = 1) = sigmoid(x w) by Newton's method with a small ridge. x (N, F), y (N,)."""
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -40, 40)))  # (N,)
        grad = x.T @ (p - y) + l2 * w
        hess = (x * (p * (1 - p))[:, None]).T @ x + l2 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32, help="training-template prompts to decode")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--depth", type=int, default=24, help="drafts per position (the longest run fitted)")
    parser.add_argument("--out", default=str(DEFAULT_CALIBRATION))
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    import torch

    from ..analysis.calibration import expected_calibration_error
    from ..engine import DecodeConfig, SpeculativeDecoder
    from ..models.registry import load_pair

    torch.set_num_threads(args.threads)
    pair = load_pair()
    decoder = SpeculativeDecoder(pair, drafter="dflash")  # AR decoding: the drafter is never used
    corpus = load_corpus(pair.lookup_corpus, pair.target.vocab_size) if pair.lookup_corpus else None
    prompts = fit_prompts(args.prompts)
    split = len(prompts) * 3 // 4
    data = {"fit": ([], []), "check": ([], [])}
    for i, text in enumerate(prompts):
        ids = pair.encode_prompt(text)
        records = decoder.run(ids, "ar", None, DecodeConfig(max_new_tokens=args.max_new_tokens))
        full = ids + [t for r in records for t in r.committed_tokens]
        feats, labels = trajectory_samples(full, len(ids), args.depth, corpus)
        part = data["fit" if i < split else "check"]
        part[0].extend(feats)
        part[1].extend(labels)
        print(f"{i + 1}/{len(prompts)} prompts, {len(data['fit'][1]) + len(data['check'][1])} drafts", file=sys.stderr)
    x = np.array([feature_vector(f) for f in data["fit"][0]])
    w = fit_logistic(x, np.array(data["fit"][1], dtype=np.float64))
    calibration = LookupCalibration(tuple(float(v) for v in w), {})
    q = np.array([calibration.confidence(f) for f in data["check"][0]])
    y = np.array(data["check"][1], dtype=np.float64)
    meta = {"pair": pair.name, "prompts": len(prompts), "fit_prompts": split, "fit_drafts": len(data["fit"][1]),
            "check_drafts": int(y.size), "check_ece": float(expected_calibration_error(q, y)),
            "check_mean_q": float(q.mean()), "check_accept_rate": float(y.mean()),
            "max_new_tokens": args.max_new_tokens, "depth": args.depth,
            "command": "python -m libraspec.drafters.lookup_fit " + " ".join(argv or sys.argv[1:])}
    LookupCalibration(calibration.weights, meta).save(args.out)
    print(meta, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
