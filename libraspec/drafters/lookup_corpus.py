"""The look-up drafter's corpus of the pair's own past outputs: `python -m libraspec.drafters.lookup_corpus`.

Greedy responses of the target to training-template prompts (never the held-out set,
`assets/prompts` or the public suites), decoded in batches with `generate`, saved as token
ids to `assets/lookup_corpus.json` (bounded: `--prompts` x `--max-new-tokens`). The look-up
drafter indexes it next to each sequence's own text, so phrasing the target repeats across
answers ("Here is a", code idioms, list layouts) can be drafted the first time it appears.
The run resumes from the file: each batch is saved atomically as it finishes.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from ..files import atomic_write_text
from .lookup import DEFAULT_CORPUS

FIT_SEED, CORPUS_SEED = 7, 11


def fit_prompts(count: int) -> list[str]:
    """The training-template prompts the confidence model is fitted on (`lookup_fit`)."""
    from ..train.prompts import training_prompts
    return random.Random(FIT_SEED).sample(training_prompts(), count)


def corpus_prompts(count: int, exclude: int = 64) -> list[str]:
    """Training-template prompts for the corpus, disjoint from the first `exclude` fit prompts."""
    from ..train.prompts import training_prompts
    taken = set(fit_prompts(exclude))
    pool = [p for p in training_prompts() if p not in taken]
    return random.Random(CORPUS_SEED).sample(pool, count)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=192)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(DEFAULT_CORPUS))
    args = parser.parse_args(argv)
    import torch

    from ..models.registry import load_pair

    torch.set_num_threads(args.threads)
    pair = load_pair()
    out = Path(args.out)
    done = json.loads(out.read_text())["sequences"] if out.exists() else []
    prompts = corpus_prompts(args.prompts)
    tokenizer, model = pair.tokenizer, pair.target.model
    stop = sorted(pair.stop_ids | set(pair.target.eos_token_ids))
    for start in range(len(done), len(prompts), args.batch):
        batch = [pair.encode_prompt(p) for p in prompts[start:start + args.batch]]
        width = max(len(ids) for ids in batch)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop[0]
        ids = torch.tensor([[pad] * (width - len(x)) + x for x in batch])  # (B, W), left-padded
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in batch])  # (B, W)
        with torch.inference_mode():
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.max_new_tokens,
                                 do_sample=False, eos_token_id=stop, pad_token_id=pad)[:, width:]  # (B, new)
        for row in gen.tolist():
            cut = next((i + 1 for i, t in enumerate(row) if t in stop), len(row))
            done.append(row[:cut])
        meta = {"pair": pair.name, "prompts": len(done), "max_new_tokens": args.max_new_tokens,
                "source": "greedy responses to training-template prompts (libraspec.train.prompts), "
                          "disjoint from the look-up calibration's prompts",
                "command": "python -m libraspec.drafters.lookup_corpus " + " ".join(argv or sys.argv[1:])}
        atomic_write_text(str(out), json.dumps({"meta": meta, "sequences": done}, separators=(",", ":")))
        print(f"{len(done)}/{len(prompts)} responses", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
