"""Self-distillation data: the target's own greedy responses with its tapped hidden states.

One batched greedy decoding loop yields the tokens and, unless `--ids-only`, the target
features the drafter is conditioned on (hidden states of `TAP_LAYERS`, captured while decoding).
Finished rows leave the batch at once, so long responses do not keep short ones computing. Each
batch is one shard `shard_XXXXX.pt` = {"prompt_index", "ids" (int32 tensors), "prompt_len",
"features" (float16, (T - 1, taps * H): the features of every token but the last; absent with
`--ids-only`)}; `done.txt` lists finished prompt indices, so a restart resumes. Ids-only shards
are a few bytes a token: `features.py` adds features and the target's top-k in one teacher-forced
pass, which on a CPU is far cheaper per token than decoding (assets/TRAINING.md).

    python -m libraspec.train.selfdistill --out DIR [--prompts FILE.jsonl] [--ids-only]
        [--batch-size 48] [--threads 1] [--exclude CALIB_DIR]

Prompts: `training_prompts()` (the templates), or a JSONL file of {"prompt"} such as
`magpie.py` writes; `prompt_index` is the index in that list, so `--exclude` folders must have
been made from the same prompt list.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from tqdm import tqdm
from transformers import DynamicCache

from ..files import atomic_write
from ..models.registry import CHAT_STOP_TOKENS

TAP_LAYERS = (1, 8, 14, 20, 27)  # SmolLM2-135M has 30 layers; default_target_layer_ids(30, 5)


def stop_and_pad_ids(tokenizer) -> tuple[set[int], int]:
    """The chat stop ids (end of turn / document) and the id used to left-pad a batch."""
    stop = {tokenizer.convert_tokens_to_ids(t) for t in CHAT_STOP_TOKENS}
    return stop, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(stop)


def save_shard(path, prompt_index: list[int], prompts: list[list[int]], results, taps=TAP_LAYERS) -> None:
    """One shard file (format in the module docstring), written atomically; results whose
    features are None make an ids-only shard."""
    payload = {
        "prompt_index": list(prompt_index),
        "prompt_len": [len(p) for p in prompts],
        "ids": [torch.tensor(ids, dtype=torch.int32) for ids, _ in results],
    }
    if all(f is not None for _, f in results):
        payload.update(features=[f for _, f in results], taps=list(taps))
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


@torch.inference_mode()
def generate_with_features(
    model, prompts: list[list[int]], max_new_tokens: int, eos_ids: set[int], pad_id: int, taps=TAP_LAYERS
) -> list[tuple[list[int], torch.Tensor | None]]:
    """Greedy responses for a batch; returns (prompt + response ids, features (T - 1, taps * H)),
    features None when `taps` is empty (no hidden states are kept)."""
    B = len(prompts)
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((B, width), pad_id, dtype=torch.long)  # (B, T) left padded
    mask = torch.zeros(B, width, dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    cache = DynamicCache(config=model.config)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    keep_features = bool(taps)
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        output_hidden_states=keep_features,
        logits_to_keep=1,
    )
    feats = [
        [torch.cat([out.hidden_states[t + 1][row, width - len(p) :] for t in taps], -1).half().cpu()]
        if keep_features
        else []
        for row, p in enumerate(prompts)
    ]  # per row: list of (T_i, taps * H)
    tokens = [list(p) for p in prompts]
    alive = list(range(B))  # original row of each batch row still decoding
    next_tok = out.logits[:, -1].argmax(-1)  # (B,)
    last_pos = positions[:, -1]
    for step in range(max_new_tokens):
        for row, tok in zip(alive, next_tok.tolist()):
            tokens[row].append(tok)
        done = [i for i, row in enumerate(alive) if tokens[row][-1] in eos_ids or step == max_new_tokens - 1]
        if done:
            keep = [i for i in range(len(alive)) if i not in done]
            if not keep:
                break
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            mask, next_tok, last_pos = mask[index], next_tok[index], last_pos[index]
            alive = [alive[i] for i in keep]
        mask = torch.cat([mask, torch.ones(len(alive), 1, dtype=torch.long, device=device)], -1)
        last_pos = last_pos + 1
        out = model(
            input_ids=next_tok.view(-1, 1),
            attention_mask=mask,
            position_ids=last_pos.view(-1, 1),
            past_key_values=cache,
            use_cache=True,
            output_hidden_states=keep_features,
        )
        if keep_features:
            step_feats = torch.cat([out.hidden_states[t + 1][:, 0] for t in taps], -1).half().cpu()  # (b, taps * H)
            for i, row in enumerate(alive):
                feats[row].append(step_feats[i : i + 1])
        next_tok = out.logits[:, -1].argmax(-1)
    return [
        (tokens[row], torch.cat(feats[row], 0)[: len(tokens[row]) - 1] if keep_features else None) for row in range(B)
    ]


def main(argv=None) -> None:
    from ..models.embedded import chat_prompt_ids, load_smollm2
    from ..paths import read_prompts
    from .data import shard_paths
    from .prompts import training_prompts

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--prompts", default="", help='JSONL file of {"prompt"} (default: the templates)')
    parser.add_argument("--ids-only", action="store_true", help="store token ids only (features.py adds features)")
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--batch-size", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0, help="stop after this many prompts (0: all)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--exclude",
        nargs="*",
        default=[],
        help="data folders whose prompts are never generated here (e.g. a calibration split)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    done_path = os.path.join(args.out, "done.txt")
    done = set()
    if os.path.exists(done_path):
        done = {int(line) for line in open(done_path) if line.strip()}
    for folder in args.exclude:
        for path in shard_paths(folder):
            done |= set(torch.load(path, map_location="cpu", weights_only=False)["prompt_index"])
    model, tokenizer = load_smollm2()
    model.to(args.device)
    eos_ids, pad_id = stop_and_pad_ids(tokenizer)
    prompts = read_prompts(args.prompts) if args.prompts else training_prompts()
    taps = () if args.ids_only else TAP_LAYERS
    todo = [i for i in range(len(prompts)) if i not in done][: args.limit or None]
    encoded = {i: chat_prompt_ids(tokenizer, prompts[i]) for i in todo}
    todo.sort(key=lambda i: len(encoded[i]))  # similar lengths share a batch: less padding
    shard = len([f for f in os.listdir(args.out) if f.startswith("shard_")])
    bar = tqdm(total=len(todo), unit="prompt", file=sys.stderr)
    tokens_made, start = 0, time.time()
    for begin in range(0, len(todo), args.batch_size):
        batch = todo[begin : begin + args.batch_size]
        results = generate_with_features(model, [encoded[i] for i in batch], args.max_new_tokens, eos_ids, pad_id, taps)
        save_shard(os.path.join(args.out, f"shard_{shard:05d}.pt"), batch, [encoded[i] for i in batch], results)
        shard += 1
        with open(done_path, "a") as f:
            f.write("".join(f"{i}\n" for i in batch))
        tokens_made += sum(len(ids) - len(encoded[i]) for i, (ids, _) in zip(batch, results))
        bar.update(len(batch))
        bar.set_postfix(tokens=tokens_made, tok_s=f"{tokens_made / (time.time() - start):.1f}")


if __name__ == "__main__":
    main()
