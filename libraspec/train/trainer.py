"""Training loop, loss and held-out estimate of tau for the DFlash-style drafter.

Loss (DFlash): cross-entropy on the n mask slots of each block, slot k weighted by
w_k = exp(-(k - 1) / gamma) (gamma = 7), so early draft positions, which gate every later
one, count most. With `distill` > 0 and shards that carry the target's top-k (features.py),
the loss is (1 - distill) * that cross-entropy + distill * the same-weighted cross-entropy
against the target's top-k distribution, renormalised over its entries inside the draft
vocabulary (soft labels:
the target's whole belief, not only its argmax, as EAGLE and DistillSpec train). Held-out monitor:
for blocks `[anchor, MASK x n]` over held-out
sequences, a_k = P(the drafter's greedy proposals 1..k all equal the target's tokens),
and tau_static(n) = 1 + sum_{k=1..n} a_k: the tokens a round with static length d = n
commits under greedy verification (tau = accepted + 1, docs/ARCHITECTURE.md, "Symbols").
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..models.dflash import DFlashConfig, DFlashDrafter
from .data import IGNORE, Batch, Sequence, make_batch, sample_batch


@dataclass
class TrainConfig:
    minutes: float = 60.0  # wall-clock budget of the whole run (resume continues it)
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 100
    decay_from: float = 0.6  # cosine decay over the last 40 % of the time budget
    min_lr_frac: float = 0.1
    grad_clip: float = 1.0
    gamma: float = 7.0  # position-weight decay w_k = exp(-(k-1)/gamma)
    distill: float = 0.0  # weight of the soft (top-k) cross-entropy; 0 = hard labels only
    seqs: int = 4  # sequences per batch (B)
    blocks: int = 12  # anchors per sequence (K)
    clean_frac: float = 0.25  # batches with a clean prefix after the anchor (later drafter passes)
    passes: int = 2  # drafter passes a round may need, ceil(d_max / n): clean prefixes up to (passes-1)*n
    reveal_frac: float = 0.0  # batches whose blocks are partly unmasked (iterative drafting's later passes)
    eval_minutes: float = 4.0
    ckpt_minutes: float = 3.0
    refresh_minutes: float = 2.0
    seed: int = 0


@dataclass
class TrainState:
    step: int = 0
    elapsed: float = 0.0  # seconds of training so far (across resumes)
    best_tau: float = 0.0
    history: list = field(default_factory=list)


def build_drafter(
    target,
    *,
    mask_token_id: int,
    layers: int = 1,
    block_size: int = 16,
    init_layers: list[int] | None = None,
    taps: tuple[int, ...] = (1, 8, 14, 20, 27),
    draft_vocab_size: int = 4096,
    intermediate_size: int | None = None,
) -> DFlashDrafter:
    """A drafter shaped like the target's layers, initialised from target layers `init_layers`
    (output projections zeroed, so each layer starts as the identity), target norm frozen."""
    cfg = DFlashConfig.from_target_config(
        target.config,
        block_size=block_size,
        num_hidden_layers=layers,
        target_layer_ids=list(taps),
        mask_token_id=mask_token_id,
        slot_embeddings=True,
        learned_temperature=True,
        feature_stats=True,
        feature_clip=8.0,
        draft_vocab_size=draft_vocab_size,
    )
    if intermediate_size:
        cfg.intermediate_size = intermediate_size
    drafter = DFlashDrafter(cfg, target.get_input_embeddings(), target.get_output_embeddings())
    n_layers = target.config.num_hidden_layers
    drafter.init_from_target(target, list(init_layers or [n_layers - 1 - i for i in range(layers)][::-1]))
    drafter.norm.weight.requires_grad_(False)
    target.requires_grad_(False)
    return drafter


@torch.no_grad()
def calibrate_temperature(drafter: DFlashDrafter, batch: Batch, spread: float = 2.0) -> float:
    """Set the learned temperature so the initial logits have std `spread`; returns the temperature."""
    drafter.log_temperature.zero_()
    batch = batch.to(drafter.fc.weight.device)
    logits = forward(drafter, batch)  # (B, K, Q, V_d)
    std = float(logits[batch.mask].std(-1).mean())
    drafter.log_temperature.fill_(math.log(max(std / spread, 1e-3)))
    return math.exp(float(drafter.log_temperature))


def forward(drafter: DFlashDrafter, batch: Batch) -> torch.Tensor:
    return drafter.forward_train(
        batch.features, batch.block_ids, batch.block_positions, batch.context_limit, batch.mask
    )  # (B, K, Q, V_d)


def block_loss(drafter: DFlashDrafter, batch: Batch, gamma: float, distill: float = 0.0) -> tuple[torch.Tensor, dict]:
    """Position-weighted cross-entropy over mask slots, mixed with the soft (top-k) one when
    `distill` > 0; also slot-1 accuracy for the log."""
    logits = forward(drafter, batch)  # (B, K, Q, V_d)
    sel = batch.labels != IGNORE  # (B, K, Q)
    if not bool(sel.any()):
        raise ValueError("batch has no labels inside the draft vocabulary")
    lg, lab, slot = logits[sel], batch.labels[sel], batch.slot[sel]  # (N, V_d), (N,), (N,)
    w = torch.exp(-(slot.float() - 1) / gamma)
    ce = F.cross_entropy(lg.float(), lab, reduction="none")
    loss = (w * ce).sum() / w.sum()
    stats = {"ce": ce.detach().mean().item()}
    soft_sel = batch.mask & (batch.soft_probs.sum(-1) > 0)  # (B, K, Q)
    if distill > 0 and bool(soft_sel.any()):
        p = batch.soft_probs[soft_sel]  # (M, k)
        p = p / p.sum(-1, keepdim=True)
        log_q = F.log_softmax(logits[soft_sel].float(), -1).gather(-1, batch.soft_ids[soft_sel].clamp_min(0))
        soft = -(p * log_q).sum(-1)  # (M,)
        ws = torch.exp(-(batch.slot[soft_sel].float() - 1) / gamma)
        soft_loss = (ws * soft).sum() / ws.sum()
        loss = (1 - distill) * loss + distill * soft_loss
        stats["soft_ce"] = soft_loss.item()
    with torch.no_grad():
        first = slot == 1
        acc1 = float((lg[first].argmax(-1) == lab[first]).float().mean()) if bool(first.any()) else float("nan")
    return loss, {"loss": loss.item(), **stats, "acc1": acc1}


@torch.no_grad()
def heldout_metrics(
    drafter: DFlashDrafter, sequences: list[Sequence], lookup: torch.Tensor, stride: int = 3, chunk: int = 48
) -> dict:
    """Teacher-forced acceptance of greedy proposals over held-out anchors (every `stride`-th).

    Returns a_k = P(first k correct) for k = 1..n, tau_static = 1 + sum a_k, per-slot
    accuracy, and the mean q of the proposals (a coarse calibration check).
    """
    was_training = drafter.training
    drafter.eval()
    n = drafter.n
    mask_id = drafter.mask_token_id
    prefix_ok, slot_ok, conf = [], [], []
    for s in sequences:
        anchors = list(s.anchors)[::stride]
        for i in range(0, len(anchors), chunk):
            ps = anchors[i : i + chunk]
            batch = make_batch([s], [ps], n, 0, mask_id, lookup).to(drafter.fc.weight.device)
            logits = forward(drafter, batch)[0, :, 1:]  # (K, n, V_d)
            tokens, q = (x.cpu() for x in drafter.propose(logits))  # (K, n) target ids, confidences
            pos = torch.tensor(ps)[:, None] + torch.arange(1, n + 1)  # (K, n)
            valid = pos < len(s.ids)
            truth = s.ids[pos.clamp(max=len(s.ids) - 1)]
            ok = (tokens == truth) & valid  # (K, n)
            slot_ok.append(ok.float())
            prefix_ok.append(ok.long().cumprod(-1).float())
            conf.append(q.float())
    drafter.train(was_training)
    a = torch.cat(prefix_ok).mean(0)  # (n,)
    return {
        "accept_prefix": [round(float(x), 4) for x in a],
        "slot_acc": [round(float(x), 4) for x in torch.cat(slot_ok).mean(0)],
        "mean_q": [round(float(x), 4) for x in torch.cat(conf).mean(0)],
        "tau_static": float(1 + a.sum()),
    }


def lr_at(cfg: TrainConfig, step: int, frac: float) -> float:
    """Linear warm-up, constant, then cosine to min_lr_frac over the last (1 - decay_from) of the time."""
    warm = min(1.0, (step + 1) / cfg.warmup_steps)
    if frac <= cfg.decay_from:
        return cfg.lr * warm
    x = min(1.0, (frac - cfg.decay_from) / (1 - cfg.decay_from))
    return cfg.lr * warm * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * x)))


def make_optimizer(drafter: DFlashDrafter, cfg: TrainConfig) -> torch.optim.AdamW:
    decay = [p for p in drafter.parameters() if p.requires_grad and p.dim() >= 2]
    other = [p for p in drafter.parameters() if p.requires_grad and p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": other, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )


def train_step(drafter: DFlashDrafter, opt, batch: Batch, cfg: TrainConfig, lr: float) -> dict:
    for group in opt.param_groups:
        group["lr"] = lr
    loss, stats = block_loss(drafter, batch, cfg.gamma, cfg.distill)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    stats["grad_norm"] = float(
        torch.nn.utils.clip_grad_norm_([p for p in drafter.parameters() if p.requires_grad], cfg.grad_clip)
    )
    opt.step()
    return stats


def draw_batch(
    pool: list[Sequence], rng: torch.Generator, cfg: TrainConfig, n: int, mask_id: int, lookup: torch.Tensor
) -> Batch:
    """A plain first-pass batch, or (clean_frac of the time) one with m clean tokens after the anchor:
    half of those times m = j*n (the engine's pass j+1 after j fully drafted blocks), else m uniform in
    1..(passes-1)*n. Fewer blocks per sequence then, so every batch has about the same token count.
    reveal_frac of the time, the mask slots are partly shown (`data.random_reveal`)."""
    clean, top = 0, max(1, (cfg.passes - 1) * n)
    if cfg.passes > 1 and float(torch.rand((), generator=rng)) < cfg.clean_frac:
        if float(torch.rand((), generator=rng)) < 0.5:
            clean = n * int(torch.randint(1, cfg.passes, (), generator=rng))
        else:
            clean = int(torch.randint(1, top + 1, (), generator=rng))
    blocks = max(1, cfg.blocks * (1 + n) // (1 + clean + n))
    reveal = cfg.reveal_frac > 0 and float(torch.rand((), generator=rng)) < cfg.reveal_frac
    return sample_batch(pool, rng, cfg.seqs, blocks, n, clean, mask_id, lookup, reveal)


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start
