"""Train the embedded drafter on self-distilled shards; export the best held-out checkpoint.

    python -m libraspec.train --data /work/data/sd2 --out runs/drafter --minutes 90 \
        [--heldout OUT/heldout.pt] [--taps 1,8,14,20,27] [--distill 0.5] [--device cpu|cuda] [--resume]
        [--export assets/drafter] [--export-last DIR]

The Magpie answers the look-up drafter holds apart (`data.held_apart`, every
eighth prompt) are never trained on: they stay the calibration data of both drafters.
Training starts once `--data` holds `--min-shards` shards (it waits up to `--wait-minutes`
for the generator, then exits with an error). Every `ckpt_minutes` the full state
(drafter, optimiser, step, elapsed time, RNG, log) goes to OUT/state.pt, so `--resume`
continues where it stopped; new shards are picked up every `refresh_minutes`. Every
`eval_minutes` the held-out tau_static(n) is measured
(trainer.heldout_metrics) and, when it is the best so far, the drafter is saved to
OUT/best and exported (DFlash format) to `--export`; `--export-last` exports the final weights once the
budget is spent. A log line per evaluation goes to
OUT/log.jsonl; a tqdm bar with the loss goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from ..files import atomic_write
from ..paths import ASSETS
from .data import ShardPool, coverage, draft_vocabulary, feature_stats, load_shard, vocab_lookup
from .prompts import MONITOR_PROMPTS
from .selfdistill import TAP_LAYERS, stop_and_pad_ids
from .trainer import (
    TrainConfig,
    TrainState,
    build_drafter,
    calibrate_temperature,
    draw_batch,
    heldout_metrics,
    lr_at,
    make_optimizer,
    train_step,
)

ASSETS_DRAFTER = ASSETS / "drafter"
HELD_APART = "held-apart"  # --heldout value: monitor on the look-up's held-apart Magpie answers in --data


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="folder of selfdistill shard_*.pt files")
    p.add_argument("--out", required=True, help="run folder (checkpoints, log)")
    p.add_argument("--minutes", type=float, required=True, help="training wall-clock budget")
    p.add_argument(
        "--heldout",
        default=None,
        help="held-out shard (never trained on; default OUT/heldout.pt); made from the held-out "
        f"prompts with --taps if missing; '{HELD_APART}': the held-apart Magpie answers in --data",
    )
    p.add_argument(
        "--taps",
        default=",".join(map(str, TAP_LAYERS)),
        help="target layers the drafter reads (the shards must hold them; 29 = the last layer)",
    )
    p.add_argument("--heldout-seqs", type=int, default=16, help="held-out sequences used by the monitor")
    p.add_argument("--export", default=str(ASSETS_DRAFTER), help="where the best checkpoint is exported ('' = no)")
    p.add_argument(
        "--export-last",
        default="",
        help="where the final weights are exported once the budget is spent "
        "(DFlash format; with --resume on a finished run it only exports)",
    )
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--resume", action="store_true")
    p.add_argument(
        "--init-from",
        default="",
        help="warm start: weights of another run's state.pt or a DFlash "
        "folder such as assets/drafter (feature stats, fc, layers, temperature; slot embeddings cut to "
        "this block size; more --taps than it read start with zero fc columns)",
    )
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--init-layers", type=int, nargs="*", default=None)
    p.add_argument("--vocab", type=int, default=4096, help="draft vocabulary size V_d")
    p.add_argument("--mask-token", default="<|im_start|>", help="token used as MASK (never emitted in responses)")
    p.add_argument("--min-shards", type=int, default=1)
    p.add_argument(
        "--wait-minutes",
        type=float,
        default=30.0,
        help="how long to wait for --min-shards shards in --data before giving up",
    )
    p.add_argument("--d-max", type=int, default=24, help="longest d LibraSpec may pick (sets the clean prefixes)")
    for name, value in asdict(TrainConfig()).items():
        if name not in ("minutes", "passes"):
            p.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    return p.parse_args(argv)


def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def wait_for_shards(pool: ShardPool, min_shards: int, timeout_s: float, poll_s: float = 20.0) -> None:
    """Refresh `pool` until it holds `min_shards` shards (the generator may not have written
    them yet); TimeoutError after `timeout_s` seconds without them."""
    deadline = time.monotonic() + timeout_s
    while True:
        pool.refresh()
        if len(pool.loaded) >= min_shards:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(
                f"{pool.folder} holds {len(pool.loaded)} of the {min_shards} shard(s) needed after "
                f"{timeout_s / 60:.1f} min: is selfdistill writing there? (--data, --wait-minutes)"
            )
        time.sleep(min(poll_s, left))


def warm_start(drafter, state: dict, taps: list[int] | None = None, stats=None) -> None:
    """Load another run's drafter weights; slot embeddings keep the first block_size rows.

    A deeper drafter keeps its own initialisation for the layers the other run lacks (target
    layers with zeroed output projections, i.e. the identity), so it starts as the shallower one.
    When the other drafter read the target layers `taps` and this one reads more, its fc columns
    and feature statistics go to the same layers' columns and the added layers' fc columns are
    zeroed, so this drafter too starts with the other's logits; the added layers' statistics are
    `stats` (mean, std over all this drafter's columns, from data) when given.
    """
    own = drafter.state_dict()
    state = {k: v.to(own[k].device) if k in own else v for k, v in state.items() if k != "draft_vocab_ids"}
    mine = list(drafter.target_layer_ids)
    if taps is not None and list(taps) != mine:
        if not set(taps) <= set(mine):
            raise ValueError(f"--init-from reads target layers {list(taps)}; this drafter's {mine} lack some")
        width = drafter.config.hidden_size
        cols = torch.cat([torch.arange(width) + mine.index(t) * width for t in taps])
        fc = torch.zeros_like(own["fc.weight"])
        fc[:, cols] = state["fc.weight"]
        state["fc.weight"] = fc
        for i, name in enumerate(("feature_mean", "feature_std")):
            if name in state:
                merged = (stats[i] if stats is not None else own[name]).to(own[name].device).clone()
                merged[cols] = state[name]
                state[name] = merged
    if "slot_embeddings" in state:
        state["slot_embeddings"] = state["slot_embeddings"][: own["slot_embeddings"].shape[0]]
    saved_layers = {int(k.split(".")[1]) for k in state if k.startswith("layers.")}
    extra = [k for k in own if k.startswith("layers.") and int(k.split(".")[1]) >= len(saved_layers)]
    missing = [k for k in own if k not in state and k != "draft_vocab_ids" and k not in extra]
    if missing or len(saved_layers) > drafter.config.num_hidden_layers:
        raise ValueError(
            f"--init-from does not fit this drafter: lacks {missing[:5]}, "
            f"has {len(saved_layers)} layers for {drafter.config.num_hidden_layers}"
        )
    drafter.load_state_dict({**own, **state})


def init_source(path, target) -> tuple[dict, list[int]]:
    """Weights and tapped layers of `--init-from`: a run's state.pt or a DFlash-format folder."""
    from ..models.dflash import DFlashDrafter

    if Path(path).is_dir():
        other = DFlashDrafter.from_pretrained(path, target)
        return other.state_dict(), list(other.target_layer_ids)
    saved = torch.load(path, map_location="cpu", weights_only=False)
    taps = saved.get("args", {}).get("taps")  # runs from before --taps read TAP_LAYERS
    return saved["drafter"], [int(t) for t in taps.split(",")] if taps else list(TAP_LAYERS)


@torch.no_grad()
def make_heldout(
    target,
    tokenizer,
    path,
    count: int = MONITOR_PROMPTS,
    max_new_tokens: int = 160,
    batch: int = 16,
    taps: tuple[int, ...] = TAP_LAYERS,
) -> None:
    """Greedy responses + features for the first `count` held-out prompts, saved as one shard at `path`."""
    from ..models.embedded import chat_prompt_ids
    from .prompts import heldout_prompts
    from .selfdistill import generate_with_features, save_shard

    eos, pad = stop_and_pad_ids(tokenizer)
    encoded = [chat_prompt_ids(tokenizer, p) for p in heldout_prompts()[:count]]
    results = []
    for i in range(0, len(encoded), batch):
        results += generate_with_features(target, encoded[i : i + batch], max_new_tokens, eos, pad, taps)
    save_shard(path, range(len(encoded)), encoded, results, taps)


def main(argv=None) -> None:
    from ..models.embedded import load_smollm2

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = TrainConfig(
        **{k: getattr(args, k) for k in asdict(TrainConfig()) if k not in ("minutes", "passes")}, minutes=args.minutes
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = seed_everything(cfg.seed)
    target, tokenizer = load_smollm2()
    target.requires_grad_(False).to(args.device)
    mask_id = tokenizer.convert_tokens_to_ids(args.mask_token)
    stop_ids = sorted(stop_and_pad_ids(tokenizer)[0])
    taps = tuple(int(t) for t in args.taps.split(","))
    args.heldout = str(out / "heldout.pt") if args.heldout is None else args.heldout
    pool = ShardPool(args.data, taps)  # sets the look-up's held-apart answers aside: never trained on
    try:
        wait_for_shards(pool, args.min_shards, args.wait_minutes * 60)
    except TimeoutError as error:
        raise SystemExit(f"error: {error}") from None
    if args.heldout == HELD_APART:
        heldout = pool.held_apart[: args.heldout_seqs]
        if not heldout:
            raise SystemExit(f"error: --heldout {HELD_APART}: {args.data} holds no held-apart Magpie answers")
    else:
        if args.heldout and not os.path.exists(args.heldout):
            make_heldout(target, tokenizer, args.heldout, batch=64 if args.device == "cuda" else 16, taps=taps)
        heldout = load_shard(args.heldout, taps)[: args.heldout_seqs] if args.heldout else []
    vocab_size = target.config.vocab_size
    drafter = build_drafter(
        target,
        mask_token_id=mask_id,
        layers=args.layers,
        block_size=args.block_size,
        init_layers=args.init_layers,
        draft_vocab_size=args.vocab,
        taps=taps,
    )
    drafter.to(args.device)
    n = drafter.n
    cfg.passes = -(-args.d_max // n)  # the engine drafts up to ceil(d_max / n) blocks per round
    state, ckpt = TrainState(), out / "state.pt"
    if args.resume and ckpt.exists():
        saved = torch.load(ckpt, map_location="cpu", weights_only=False)
        drafter.load_state_dict(saved["drafter"])
        state = TrainState(**saved["state"])
        rng.set_state(saved["rng"])
    elif args.init_from:
        weights, init_taps = init_source(args.init_from, target)
        added = list(init_taps) != list(taps)
        warm_start(drafter, weights, init_taps, feature_stats(pool.sequences) if added else None)
    else:
        drafter.set_feature_stats(*feature_stats(pool.sequences))
        drafter.set_draft_vocab(draft_vocabulary(pool.sequences, args.vocab, stop_ids, vocab_size))
        lookup = vocab_lookup(drafter.draft_vocab_ids.cpu(), vocab_size)
        calibrate_temperature(drafter, draw_batch(pool.sequences, rng, cfg, n, mask_id, lookup))
    drafter.to(args.device).train()
    opt = make_optimizer(drafter, cfg)
    if args.resume and ckpt.exists():
        opt.load_state_dict(saved["opt"])

    def refresh_vocab():
        drafter.set_draft_vocab(draft_vocabulary(pool.sequences, args.vocab, stop_ids, vocab_size))
        return vocab_lookup(drafter.draft_vocab_ids.cpu(), vocab_size)

    def log(entry):
        state.history.append(entry)
        with open(out / "log.jsonl", "a") as f:
            f.write(json.dumps(entry) + "\n")

    def evaluate(train_stats):
        m = heldout_metrics(drafter, heldout, lookup.cpu()) if heldout else {"tau_static": 0.0}
        entry = {
            "step": state.step,
            "elapsed_min": round(state.elapsed / 60, 2),
            "train_loss": train_stats,
            "sequences": len(pool.sequences),
            "response_tokens": pool.response_tokens,
            "temperature": round(drafter.log_temperature.detach().exp().item(), 4),
            "heldout_coverage": round(coverage(heldout, drafter.draft_vocab_ids.cpu(), vocab_size), 4)
            if heldout
            else None,
            **m,
        }
        if m["tau_static"] > state.best_tau:
            state.best_tau = m["tau_static"]
            entry["best"] = True
            drafter.save_pretrained(out / "best")
            if args.export:
                drafter.save_pretrained(args.export)
        log(entry)
        return m

    def checkpoint():
        full = {
            "drafter": drafter.state_dict(),
            "opt": opt.state_dict(),
            "state": asdict(state),
            "rng": rng.get_state(),
            "args": vars(args),
        }
        atomic_write(ckpt, lambda tmp: torch.save(full, tmp))

    lookup = refresh_vocab()
    budget = cfg.minutes * 60
    bar = tqdm(total=int(budget), initial=int(state.elapsed), unit="s", file=sys.stderr, dynamic_ncols=True)
    last_eval = last_ckpt = last_refresh = state.elapsed
    window: list[dict] = []
    if state.step == 0:
        evaluate({})
    while state.elapsed < budget:
        start = time.perf_counter()
        batch = draw_batch(pool.sequences, rng, cfg, n, mask_id, lookup).to(args.device)
        stats = train_step(drafter, opt, batch, cfg, lr_at(cfg, state.step, state.elapsed / budget))
        state.step += 1
        window.append(stats)
        state.elapsed += time.perf_counter() - start
        bar.update(int(state.elapsed) - bar.n)
        bar.set_postfix(
            step=state.step,
            loss=f"{stats['loss']:.3f}",
            acc1=f"{stats['acc1']:.2f}",
            tau=f"{state.best_tau:.2f}",
            toks=pool.response_tokens,
        )
        if state.elapsed - last_refresh >= cfg.refresh_minutes * 60:
            if pool.refresh():
                lookup = refresh_vocab()
            last_refresh = state.elapsed
        if state.elapsed - last_eval >= cfg.eval_minutes * 60 or state.elapsed >= budget:
            keys = dict.fromkeys(k for w in window for k in w)  # soft_ce is absent from batches without top-k
            mean = {k: round(sum(w[k] for w in window if k in w) / sum(k in w for w in window), 4) for k in keys}
            evaluate(mean)
            window, last_eval = [], state.elapsed
        if state.elapsed - last_ckpt >= cfg.ckpt_minutes * 60 or state.elapsed >= budget:
            checkpoint()
            last_ckpt = state.elapsed
    bar.close()
    if args.export_last:
        drafter.save_pretrained(args.export_last)


if __name__ == "__main__":
    main()
