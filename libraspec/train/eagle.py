"""Train the EAGLE-3-style head (`models.eagle`) on the self-generated feature shards, on a CPU.

Distillation from the target: every window of a self-generated answer is unrolled `--passes`
drafting steps (EAGLE-3's training-time test, `EagleHead.forward_train`), and pass k at position j
learns the target's next-token distribution after position j (its stored top-k, mapped into the
draft vocabulary; weight --distill) and the greedy token itself (weight 1 - --distill), weighted
--decay^(k-1). Only positions a real round drafts are scored: pass k at j belongs to the round
anchored at j - k + 1, which must be the last prompt token or later.

    python -m libraspec.train.eagle --data FEATURES --out RUN [--minutes 60] [--resume]
        [--taps 1,14,27] [--passes 3] [--window 192] [--seqs 8] [--threads 2] [--export DIR]

Resumes from RUN/state.pt (model, optimizer, elapsed time, step: the --minutes budget is kept
across resumes); RUN/log.jsonl has one line per logged step and per held-apart evaluation, whose
sequences (`data.held_apart`) are never trained on; each evaluation also loads the shards written
since (the features stage may run beside training). --export receives the weights with the best
held-apart tau_3 (accepted drafts + 1 over three greedy steps); RUN/last the final ones.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from ..files import atomic_write, atomic_write_text
from ..models.checkpoint import target_parts
from ..models.eagle import EagleConfig, EagleHead
from .data import IGNORE, Sequence, ShardPool, feature_stats, vocab_lookup

TAPS = (1, 14, 27)  # SmolLM2-135M (30 layers): a low, a middle and a high layer, as EAGLE-3


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="feature shards (libraspec.train.features)")
    p.add_argument("--out", required=True, help="run folder: state.pt, log.jsonl, last/")
    p.add_argument("--minutes", type=float, default=60.0, help="training budget, kept across resumes")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--taps", default=",".join(map(str, TAPS)))
    p.add_argument("--vocab-from", default="assets/drafter", help="a drafter folder whose draft vocabulary to share")
    p.add_argument("--passes", type=int, default=3, help="unrolled drafting steps (training-time test)")
    p.add_argument("--window", type=int, default=192, help="tokens per training window")
    p.add_argument("--seqs", type=int, default=8, help="windows per batch")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-steps", type=int, default=30)
    p.add_argument("--distill", type=float, default=0.5)
    p.add_argument("--decay", type=float, default=0.8, help="weight of pass k: decay^(k-1)")
    p.add_argument("--intermediate-size", type=int, default=768)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--eval-every", type=float, default=6.0, help="minutes between held-apart evaluations")
    p.add_argument("--export", default=None, help="folder for the best weights (config.json + model.safetensors)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def window(s: Sequence, length: int, rng: random.Random) -> tuple[int, int]:
    """[start, end] of a window of at most `length` positions, all with features (end <= T - 2):
    anywhere from a quarter window before the first anchor to half a window before the end, so
    every part of an answer is trained on, with some context before it."""
    last = len(s.ids) - 2
    lo = max(0, s.prompt_len - 1 - length // 4)
    start = rng.randint(lo, max(lo, last - length // 2))
    return start, min(last, start + length - 1)


def make_batch(seqs: list[Sequence], spans: list[tuple[int, int]], lookup: torch.Tensor, passes: int) -> dict:
    """Padded windows [start, end] of the sequences: ids, features, positions (B, W), per-pass label
    masks (P, B, W), hard labels and soft top-k labels in draft-vocabulary indices."""
    w = max(e - b + 1 for b, e in spans)
    k = seqs[0].topk_ids.shape[1] if seqs[0].topk_ids is not None else 0
    b = len(seqs)
    ids = torch.zeros(b, w, dtype=torch.long)
    feats = torch.zeros(b, w, seqs[0].features.shape[1])
    positions = torch.arange(w).repeat(b, 1)
    hard = torch.full((b, w), IGNORE, dtype=torch.long)
    soft_ids = torch.full((b, w, k), IGNORE, dtype=torch.long)
    soft_p = torch.zeros(b, w, k)
    scored = torch.zeros(passes, b, w, dtype=torch.bool)
    j = torch.arange(w)
    for row, (s, (start, end)) in enumerate(zip(seqs, spans)):
        m = end - start + 1
        ids[row, :m] = s.ids[start : end + 1]
        feats[row, :m] = s.features[start : end + 1].float()
        positions[row] = start + j
        hard[row, :m] = lookup[s.ids[start + 1 : end + 2]]
        if k:
            mapped = lookup[s.topk_ids[start : end + 1].long()]
            soft_ids[row, :m] = mapped
            soft_p[row, :m] = torch.where(mapped != IGNORE, s.topk_probs[start : end + 1].float(), 0.0)
        for p in range(passes):  # pass p + 1 at j: anchor j - p needs a feature before it, inside the window
            anchor = start + j - p
            scored[p, row] = (j - p >= 1) & (j < m) & (anchor >= s.prompt_len - 1)
    return {"ids": ids, "features": feats, "positions": positions, "hard": hard, "soft_ids": soft_ids,
            "soft_p": soft_p, "scored": scored}  # fmt: skip


def loss_of(head: EagleHead, batch: dict, passes: int, distill: float, decay: float) -> tuple[torch.Tensor, dict]:
    outs = head.forward_train(batch["ids"], batch["features"], batch["positions"], passes)
    total, weights, stats = 0.0, 0.0, {}
    for p, logits in enumerate(outs):
        mask = batch["scored"][p] & (batch["hard"] != IGNORE)  # (B, W)
        logp = F.log_softmax(logits.float(), dim=-1)  # (B, W, V_d)
        hard = -logp.gather(-1, batch["hard"].clamp(min=0)[..., None])[..., 0]  # (B, W)
        soft_ids = batch["soft_ids"].clamp(min=0)
        soft = -(logp.gather(-1, soft_ids) * batch["soft_p"]).sum(-1)  # (B, W)
        per = (1 - distill) * hard + distill * soft
        count = mask.sum().clamp(min=1)
        term = (per * mask).sum() / count
        weight = decay**p
        total, weights = total + weight * term, weights + weight
        right = (logits.argmax(-1) == batch["hard"]) & mask
        stats[f"acc_{p + 1}"] = round(float(right.sum() / count), 4)
    loss = total / weights
    stats["loss"] = round(float(loss.detach()), 4)
    return loss, stats


@torch.no_grad()
def held_apart_metrics(head: EagleHead, seqs: list[Sequence], lookup: torch.Tensor, passes: int) -> dict:
    """On held-apart answers: a_k (pass k's top-1 equals the greedy token, given k - 1 correct steps
    before it), tau_passes (1 + drafts accepted by a greedy round of `passes` drafts, mean over
    anchors) and the mean q of step 1. Whole answers, one at a time."""
    head.eval()
    right_all, q1 = [], []
    for s in seqs:
        end = len(s.ids) - 2
        batch = make_batch([s], [(0, end)], lookup, passes)
        outs = head.forward_train(batch["ids"], batch["features"], batch["positions"], passes)
        w = batch["ids"].shape[1]
        anchors = [a for a in range(max(1, s.prompt_len - 1), w) if a + passes - 1 < w]
        if not anchors:
            continue
        rows = []
        for p in range(passes):
            ok = (outs[p][0].argmax(-1) == batch["hard"][0]) & (batch["hard"][0] != IGNORE)  # (W,)
            rows.append(ok[torch.tensor(anchors) + p])
        right_all.append(torch.stack(rows, 1))  # (anchors, passes)
        q1.append(torch.softmax(outs[0][0].float(), -1).max(-1).values[torch.tensor(anchors)])
    head.train()
    right = torch.cat(right_all).float()
    prefix = right.cumprod(1)  # accepted through step k
    a = [float(prefix[:, k].sum() / max(float(prefix[:, k - 1].sum()), 1.0)) if k else float(prefix[:, 0].mean())
         for k in range(passes)]  # fmt: skip
    return {
        "a": [round(x, 4) for x in a],
        f"tau_{passes}": round(float(1 + prefix.sum(1).mean()), 4),
        "mean_q1": round(float(torch.cat(q1).mean()), 4),
        "anchors": int(right.shape[0]),
    }


def lr_at(step: int, frac: float, lr: float, warmup: int) -> float:
    """Linear warm-up, then cosine to 10% over the time budget."""
    warm = min(1.0, (step + 1) / warmup)
    return lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def build_head(target, taps, vocab_ids: torch.Tensor, intermediate: int, train_seqs) -> EagleHead:
    model, embed, head_w = target_parts(target)
    tc = model.config
    config = EagleConfig(
        hidden_size=tc.hidden_size,
        vocab_size=embed.weight.shape[0],
        num_target_layers=tc.num_hidden_layers,
        target_layer_ids=list(taps),
        intermediate_size=intermediate,
        num_attention_heads=tc.num_attention_heads,
        num_key_value_heads=tc.num_key_value_heads,
        head_dim=tc.hidden_size // tc.num_attention_heads,
        rms_norm_eps=tc.rms_norm_eps,
        rope_theta=float((getattr(tc, "rope_parameters", None) or {}).get("rope_theta", 100_000.0)),
        draft_vocab_size=len(vocab_ids),
    )
    head = EagleHead(config, embed, head_w)
    head.init_from_target(target, taps[-1])
    head.set_draft_vocab(vocab_ids)
    head.set_feature_stats(*feature_stats(train_seqs))
    return head


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    from ..models.embedded import load_smollm2

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    taps = tuple(int(t) for t in args.taps.split(","))
    pool = ShardPool(args.data, taps)
    pool.refresh()
    if not pool.sequences:
        raise SystemExit(f"{args.data} holds no feature shards: run `scripts/train_drafter.sh features` first")
    target, _ = load_smollm2(dtype=torch.float32)
    for p in target.parameters():
        p.requires_grad_(False)
    vocab_ids = load_file(str(Path(args.vocab_from) / "model.safetensors"))["draft_vocab_ids"].long()
    lookup = vocab_lookup(vocab_ids, target.config.vocab_size)
    head = build_head(target, taps, vocab_ids, args.intermediate_size, pool.sequences)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    state_path = out / "state.pt"
    state = {"step": 0, "elapsed": 0.0, "best": -1.0, "evals": 0}
    if args.resume and state_path.exists():
        saved = torch.load(state_path, map_location="cpu", weights_only=False)
        head.load_state_dict(saved["head"])
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
        print(f"resumed at step {state['step']}, {state['elapsed'] / 60:.1f} of {args.minutes} min")
    rng = random.Random(args.seed + state["step"])
    held = pool.held_apart[:48]
    budget = args.minutes * 60

    def log(entry: dict) -> None:
        with open(out / "log.jsonl", "a") as handle:
            handle.write(json.dumps(entry) + "\n")

    def checkpoint() -> None:
        payload = {"head": head.state_dict(), "opt": opt.state_dict(), "state": dict(state)}
        atomic_write(state_path, lambda tmp: torch.save(payload, tmp))

    def evaluate() -> None:
        metrics = held_apart_metrics(head, held, lookup, args.passes)
        added = pool.refresh()  # shards the features stage wrote meanwhile join the training pool
        metrics["train_sequences"] = len(pool.sequences)
        log(
            {
                "step": state["step"],
                "elapsed_min": round(state["elapsed"] / 60, 2),
                "held_apart": metrics,
                "added": added,
            }
        )
        print(f"step {state['step']}: held apart {metrics}", flush=True)
        score = metrics[f"tau_{args.passes}"]
        if score > state["best"]:
            state["best"] = score
            if args.export:
                head.save_pretrained(args.export)
        state["evals"] += 1

    head.train()
    last_save = time.monotonic()
    while state["elapsed"] < budget:
        began = time.perf_counter()
        seqs = rng.sample(pool.sequences, args.seqs)
        batch = make_batch(seqs, [window(s, args.window, rng) for s in seqs], lookup, args.passes)
        lr = lr_at(state["step"], state["elapsed"] / budget, args.lr, args.warmup_steps)
        for group in opt.param_groups:
            group["lr"] = lr
        loss, stats = loss_of(head, batch, args.passes, args.distill, args.decay)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        stats["grad_norm"] = round(float(torch.nn.utils.clip_grad_norm_(params, 1.0)), 3)
        opt.step()
        state["step"] += 1
        state["elapsed"] += time.perf_counter() - began
        if state["step"] % 10 == 0:
            log({"step": state["step"], "elapsed_min": round(state["elapsed"] / 60, 2), "lr": lr, **stats})
            print(f"step {state['step']} {state['elapsed'] / 60:.1f} min {stats}", flush=True)
        if state["elapsed"] >= (state["evals"] + 1) * args.eval_every * 60:
            evaluate()
        if time.monotonic() - last_save > 120:
            checkpoint()
            last_save = time.monotonic()
    evaluate()
    head.save_pretrained(out / "last")
    checkpoint()
    atomic_write_text(out / "done.json", json.dumps({"step": state["step"], "best_tau": state["best"]}))


if __name__ == "__main__":
    main()
