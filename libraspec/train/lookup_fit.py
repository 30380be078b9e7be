"""Fit the look-up drafter's confidence model: `python -m libraspec.train.lookup_fit`.

Data: the target's greedy responses to the Magpie prompts held apart from the look-up corpus
(`lookup_corpus.held_apart`: every eighth, committed under assets/selfgen; never the held-out
set, `assets/prompts` or the public suites in ../shared/data, which Magpie prompts are
decontaminated against). At every generated position the look-up drafter, with the shipped
corpus, drafts up to `--depth` tokens from the sequence so far; draft j is labelled accepted
when it and every draft before it equal the target's greedy tokens, and only drafts whose
predecessors were accepted enter the fit, so q_j estimates P(x_j accepted | x_1..x_{j-1}
accepted), the quantity Algorithm 1's products assume. A logistic model of those labels
(Newton's method) is fitted on the first three quarters of the responses and checked on the
last quarter; the check's ECE and reliability are stored with it in
`assets/lookup_calibration.json`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ..analysis.calibration import expected_calibration_error, reliability_table
from ..drafters.lookup import (
    DEFAULT_CALIBRATION,
    DEFAULT_CORPUS,
    CorpusIndex,
    LookupCalibration,
    LookupDraft,
    SuffixIndex,
    feature_vector,
    load_corpus,
)
from ..verify import SamplingConfig
from .lookup_corpus import SELFGEN, held_apart, sequences

UNFITTED = LookupCalibration.neutral()


def trajectory_samples(
    ids: list[int], prompt_len: int, depth: int, corpus: CorpusIndex | None = None
) -> tuple[list[tuple], list[int]]:
    """(features, accepted) of look-up drafts at every generated position of one greedy sequence."""
    features, labels = [], []
    index = SuffixIndex()
    index.append(ids[: prompt_len - 1])
    for t in range(prompt_len, len(ids)):  # the anchor is ids[t - 1]; the target then wrote ids[t:]
        draft = LookupDraft(index, ids[t - 1], depth, 1, SamplingConfig(), UNFITTED, corpus)
        draft.extend(1)
        truth = ids[t : t + depth]
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
    parser.add_argument("--depth", type=int, default=24, help="drafts per position (the longest run fitted)")
    parser.add_argument("--selfgen", default=str(SELFGEN), help="folder with the ids-only shard folders")
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    parser.add_argument("--out", default=str(DEFAULT_CALIBRATION))
    args = parser.parse_args(argv)

    corpus = load_corpus(args.corpus)
    data = [
        (ids, start)
        for index, ids, start in sequences("magpie_ids", Path(args.selfgen))
        if held_apart("magpie_ids", index)
    ]
    split = len(data) * 3 // 4
    parts = {"fit": ([], []), "check": ([], [])}
    for i, (ids, start) in enumerate(data):
        feats, labels = trajectory_samples(ids, start, args.depth, corpus)
        part = parts["fit" if i < split else "check"]
        part[0].extend(feats)
        part[1].extend(labels)
    x = np.array([feature_vector(f) for f in parts["fit"][0]])
    w = fit_logistic(x, np.array(parts["fit"][1], dtype=np.float64))
    calibration = LookupCalibration(tuple(float(v) for v in w), {})
    q = np.array([calibration.confidence(f) for f in parts["check"][0]])
    y = np.array(parts["check"][1], dtype=np.float64)
    meta = {
        "pair": "smollm2-135m",
        "responses": len(data),
        "fit_responses": split,
        "fit_drafts": len(parts["fit"][1]),
        "check_drafts": int(y.size),
        "check_ece": float(expected_calibration_error(q, y)),
        "check_mean_q": float(q.mean()),
        "check_accept_rate": float(y.mean()),
        "depth": args.depth,
        "check_reliability": {
            column: [None if v != v else v for v in values]  # an empty bin has no rate
            for column, values in reliability_table(q, y).to_dict("list").items()
        },
        "data": "greedy responses to the Magpie prompts held apart from the look-up corpus (assets/selfgen)",
        "command": "python -m libraspec.train.lookup_fit " + " ".join(argv or sys.argv[1:]),
    }
    LookupCalibration(calibration.weights, meta).save(args.out)
    print({k: v for k, v in meta.items() if k != "check_reliability"}, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
