"""The look-up drafter's corpus of the pair's own past outputs: `python -m libraspec.train.lookup_corpus`.

The corpus is the target's greedy responses that drafter training already made and committed
as token ids (`assets/selfgen`: Magpie prompts the target wrote itself, decontaminated against
the public sets, `assets/prompts` and the held-out prompts, and training-template prompts;
assets/TRAINING.md says how they were made). Every eighth Magpie response (`held_apart`) stays
out of the corpus: the confidence model is fitted and checked on those (`lookup_fit`), so it
never sees text the corpus can quote. The look-up drafter indexes the corpus next to each
sequence's own text, so phrasing the target repeats across answers ("To find the", code
idioms, list layouts) is drafted the first time it appears. Writes `assets/lookup_corpus.npz`
(`lookup.save_corpus`); a rerun rebuilds it from the shards in seconds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..drafters.lookup import DEFAULT_CORPUS, save_corpus
from ..paths import ASSETS
from .data import HELD_APART_EVERY, held_apart, shard_paths

SELFGEN = ASSETS / "selfgen"
SOURCES = ("magpie_ids", "template_ids")  # folders of ids-only shards under SELFGEN


def sequences(source: str, folder: Path = SELFGEN) -> list[tuple[int, list[int], int]]:
    """(prompt index, prompt + response token ids, prompt length) of every sequence in a selfgen
    folder, in shard order."""
    import torch

    paths = shard_paths(folder / source)
    if not paths:
        raise FileNotFoundError(
            f"no shards in {folder / source}: the committed self-generated responses are "
            "missing (`git checkout -- assets/selfgen`)"
        )
    out = []
    for path in paths:
        shard = torch.load(path, map_location="cpu", weights_only=False)
        for index, ids, prompt_len in zip(shard["prompt_index"], shard["ids"], shard["prompt_len"]):
            out.append((int(index), [int(t) for t in ids], int(prompt_len)))
    return out


def corpus_sequences(folder: Path = SELFGEN) -> tuple[list[list[int]], dict]:
    """The corpus's responses (everything not held apart) and how many came from each source."""
    responses, counts = [], {}
    for source in SOURCES:
        kept = [
            ids[start:]
            for index, ids, start in sequences(source, folder)
            if not held_apart(source, index) and len(ids) > start
        ]
        responses += kept
        counts[source] = {"responses": len(kept), "tokens": sum(map(len, kept))}
    return responses, counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--selfgen", default=str(SELFGEN), help="folder with the ids-only shard folders")
    parser.add_argument("--out", default=str(DEFAULT_CORPUS))
    args = parser.parse_args(argv)
    responses, counts = corpus_sequences(Path(args.selfgen))
    meta = {
        "pair": "smollm2-135m",
        "sources": counts,
        "tokens": sum(map(len, responses)),
        "source": "greedy responses of the target to Magpie and training-template prompts (assets/selfgen), "
        f"every {HELD_APART_EVERY}th Magpie response held apart for the confidence model",
        "command": "python -m libraspec.train.lookup_corpus " + " ".join(argv or sys.argv[1:]),
    }
    save_corpus(args.out, responses, meta)
    print(meta, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
