"""Teacher-forced training signal for ids-only shards: tapped features and the target's top-k.

Decoding a response costs one target forward per token; given the tokens, one teacher-forced
forward over the whole sequence yields the same hidden states (up to float rounding) for every
position at once, which on a CPU is many times cheaper per token (`--measure` times both). So
`selfdistill.py --ids-only` keeps only the tokens (a few bytes a token, small enough to keep in
the repository) and this module adds, per ids shard, a feature shard in the format `data.py`
reads: "features" (float16, (T - 1, taps * H)) plus "topk_ids" (int32) and "topk_probs"
(float16), both (T - 1, k): the target's k most likely next tokens after each position and
their probabilities, the soft labels of distillation. "argmax_agree" records how often the
teacher-forced argmax equals the stored greedy token (rounding can flip near-ties).

    python -m libraspec.train.features --ids DIR [DIR ...] --out FEATURES_DIR [--taps 1,8,14,20,27,29]
        [--topk 32] [--batch-size 8] [--threads 1] [--measure]

Resumes: a feature shard that exists is not made again. OUT/features.json records the taps and k
the folder was made with; another --taps or --topk into the same folder is refused (mixed shards
would train on different features).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from ..files import atomic_write, atomic_write_text
from .selfdistill import TAP_LAYERS

TAPS_V2 = TAP_LAYERS + (29,)  # SmolLM2-135M's last layer (hidden_states[30]) beside the five taps


def ids_shard_paths(folders) -> list[Path]:
    return [p for folder in folders for p in sorted(Path(folder).glob("shard_*.pt"))]


@torch.inference_mode()
def teacher_forced(
    model, sequences: list[torch.Tensor], taps, k: int, pad_id: int, prompt_lens: list[int] | None = None
) -> list[dict]:
    """Per sequence (T,): features (T - 1, taps * H) float16, top-k ids / probs (T - 1, k) of the
    next token after each position, and how many response tokens (those after `prompt_lens`, all
    but the first token when None) equal the argmax before them."""
    device = next(model.parameters()).device
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)  # (B, T) right padded
    mask = torch.zeros_like(ids)
    for row, s in enumerate(sequences):
        ids[row, : len(s)] = s
        mask[row, : len(s)] = 1
    out = model.model(input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=True)
    results = []
    for row, s in enumerate(sequences):
        t = len(s) - 1
        feats = torch.cat([out.hidden_states[i + 1][row, :t] for i in taps], -1)  # (T - 1, taps * H)
        logits = model.lm_head(out.last_hidden_state[row, :t]).float()  # (T - 1, V)
        probs, top = torch.softmax(logits, -1).topk(k, -1)  # (T - 1, k)
        start = prompt_lens[row] - 1 if prompt_lens else 0
        agree = int((top[start:, 0].cpu() == s[start + 1 :]).sum())
        results.append(
            {
                "features": feats.half().cpu(),
                "topk_ids": top.int().cpu(),
                "topk_probs": probs.half().cpu(),
                "agree": agree,
            }
        )
    return results


def featurize_shard(model, src: Path, dest: Path, taps, k: int, batch: int, pad_id: int) -> tuple[int, int]:
    """Write the feature shard of one ids shard; returns (response tokens, argmax agreements)."""
    data = torch.load(src, map_location="cpu", weights_only=True)
    seqs = [torch.as_tensor(x).long() for x in data["ids"]]
    lens = [int(x) for x in data["prompt_len"]]
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))  # similar lengths share a forward
    done: dict[int, dict] = {}
    for begin in range(0, len(order), batch):
        part = order[begin : begin + batch]
        for i, r in zip(part, teacher_forced(model, [seqs[i] for i in part], taps, k, pad_id, [lens[i] for i in part])):
            done[i] = r
    rows = [done[i] for i in range(len(seqs))]
    tokens, agree = sum(len(s) - n for s, n in zip(seqs, lens)), sum(r["agree"] for r in rows)
    payload = {
        "prompt_index": list(data["prompt_index"]),
        "prompt_len": list(data["prompt_len"]),
        "ids": [s.int() for s in seqs],
        "features": [r["features"] for r in rows],
        "taps": list(taps),
        "topk_ids": [r["topk_ids"] for r in rows],
        "topk_probs": [r["topk_probs"] for r in rows],
        "argmax_agree": agree / max(tokens, 1),
        "source": str(src),
    }
    atomic_write(dest, lambda tmp: torch.save(payload, tmp))
    return tokens, agree


def measure(model, tokenizer, threads: int, batch: int = 16, new_tokens: int = 64) -> dict:
    """Tokens per second of batched greedy decoding vs a teacher-forced pass over the same tokens."""
    from ..models.embedded import chat_prompt_ids
    from .prompts import training_prompts
    from .selfdistill import generate_with_features, stop_and_pad_ids

    eos, pad = stop_and_pad_ids(tokenizer)
    prompts = [chat_prompt_ids(tokenizer, p) for p in training_prompts()[:batch]]
    start = time.perf_counter()
    made = generate_with_features(model, prompts, new_tokens, eos, pad, taps=())
    decode_s = time.perf_counter() - start
    response_tokens = sum(len(ids) - len(p) for (ids, _), p in zip(made, prompts))
    seqs = [torch.tensor(ids) for ids, _ in made]
    start = time.perf_counter()
    teacher_forced(model, seqs, TAPS_V2, 32, pad)
    forced_s = time.perf_counter() - start
    all_tokens = sum(len(s) for s in seqs)
    return {
        "threads": threads,
        "batch": batch,
        "decode_tokens_per_s": round(response_tokens / decode_s, 1),
        "teacher_forced_tokens_per_s": round(all_tokens / forced_s, 1),
        "ratio": round((all_tokens / forced_s) / (response_tokens / decode_s), 1),
    }


def main(argv=None) -> None:
    from ..models.embedded import load_smollm2
    from .selfdistill import stop_and_pad_ids

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", nargs="*", default=[], help="folders of ids-only shards")
    parser.add_argument("--out", default="")
    parser.add_argument("--taps", default=",".join(map(str, TAPS_V2)))
    parser.add_argument("--topk", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--measure", action="store_true", help="print decode vs teacher-forced tokens/s and exit")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2()
    model.to(args.device)
    if args.measure:
        print(json.dumps(measure(model, tokenizer, args.threads)))
        return
    if not args.ids or not args.out:
        parser.error("--ids and --out are needed (or --measure)")
    taps = tuple(int(t) for t in args.taps.split(","))
    pad_id = stop_and_pad_ids(tokenizer)[1]
    out = Path(args.out)
    manifest, settings = out / "features.json", {"taps": list(taps), "topk": args.topk}
    if manifest.exists() and json.loads(manifest.read_text()) != settings:
        raise SystemExit(
            f"error: {out} was made with {manifest.read_text().strip()}, not {json.dumps(settings)}: use another --out"
        )
    atomic_write_text(manifest, json.dumps(settings))
    todo = []
    for src in ids_shard_paths(args.ids):
        dest = out / f"shard_{src.parent.name}_{src.stem.removeprefix('shard_')}.pt"  # data.shard_paths' pattern
        if not dest.exists():
            todo.append((src, dest))
    bar = tqdm(todo, unit="shard", file=sys.stderr)
    tokens = agree = 0
    for src, dest in bar:
        t, a = featurize_shard(model, src, dest, taps, args.topk, args.batch_size, pad_id)
        tokens, agree = tokens + t, agree + a
        bar.set_postfix(tokens=tokens, agree=f"{agree / max(tokens, 1):.3f}")


if __name__ == "__main__":
    main()
