"""Temperature scaling of a trained drafter on shards it was never trained on.

LibraSpec reads the drafter's confidences q_i as acceptance probabilities (eps_i bounds,
Algorithm 1), so q_i should be calibrated. A drafter trained on little data is
over-confident on new prompts; one scalar, the learned temperature t (logits / t), is
refit on a calibration split: shards written after the training run stopped reading
(`--skip-shards` = how many it read) or the held-apart Magpie answers training never reads
(`--held-apart`), never the held-out prompts. t minimises the
position-weighted NLL of the target's tokens (trainer.block_loss) over first-pass blocks.

    python -m libraspec.train.calibrate --drafter assets/drafter --data /work/data/sd2 --skip-shards 20
"""

from __future__ import annotations

import argparse
import math
import os

import torch

from .data import ShardPool, load_shard, shard_paths, vocab_lookup
from .trainer import TrainConfig, block_loss, draw_batch


@torch.no_grad()
def fit_temperature(drafter, sequences, batches: int = 24, seed: int = 0, gamma: float = 7.0) -> dict:
    """Grid-search t in exp(linspace(-1, 1)) * t_now on fixed first-pass batches; sets the best t."""
    n = drafter.n
    lookup = vocab_lookup(drafter.draft_vocab_ids.cpu(), drafter.config.vocab_size)
    rng = torch.Generator().manual_seed(seed)
    cfg = TrainConfig(seqs=4, blocks=16, clean_frac=0.0)
    data = [draw_batch(sequences, rng, cfg, n, drafter.mask_token_id, lookup) for _ in range(batches)]
    start = float(drafter.log_temperature)
    scores = {}
    for shift in [i / 10 for i in range(-10, 11)]:
        drafter.log_temperature.fill_(start + shift)
        scores[shift] = sum(block_loss(drafter, b, gamma)[1]["loss"] for b in data) / len(data)
    best = min(scores, key=scores.get)
    drafter.log_temperature.fill_(start + best)
    return {
        "t_before": math.exp(start),
        "t_after": math.exp(start + best),
        "nll_before": scores[0.0],
        "nll_after": scores[best],
    }


def main(argv=None) -> None:
    from ..models.dflash import DFlashDrafter
    from ..models.embedded import load_smollm2

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--drafter", required=True)
    p.add_argument("--data", required=True)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--skip-shards", type=int, help="skip the first shards of --data (the ones training read)")
    source.add_argument(
        "--held-apart",
        action="store_true",
        help="fit on the held-apart Magpie answers in --data (training never reads them)",
    )
    p.add_argument("--out", default=None, help="where to save (default: overwrite --drafter)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    target, _ = load_smollm2()
    drafter = DFlashDrafter.from_pretrained(args.drafter, target)
    taps = tuple(drafter.target_layer_ids)  # the drafter's feature columns
    if args.held_apart:
        pool = ShardPool(args.data, taps)
        pool.refresh()
        paths, sequences = sorted(pool.loaded), pool.held_apart
        if not sequences:
            raise ValueError(f"no held-apart Magpie answers in {args.data}")
    else:
        paths = shard_paths(args.data)[args.skip_shards :]
        if not paths:
            raise ValueError(f"no shards after the first {args.skip_shards} in {args.data}")
        sequences = [s for path in paths for s in load_shard(path, taps)]
    result = fit_temperature(drafter, sequences)
    drafter.save_pretrained(args.out or args.drafter)
    print(
        {
            "shards": len(paths),
            "first": os.path.basename(str(paths[0])),
            "last": os.path.basename(str(paths[-1])),
            "sequences": len(sequences),
            **result,
        }
    )


if __name__ == "__main__":
    main()
