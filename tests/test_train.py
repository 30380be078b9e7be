"""Drafter training pipeline on a tiny random target: shards -> batches -> loss -> checkpoint.

Synthetic shards come from `generate_with_features` on a tiny Qwen3 (hidden 64, 4 layers,
vocab 128), so the batching code sees exactly the shard format the real generator writes.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from libraspec.models.dflash import DFlashDrafter
from libraspec.train.data import (
    IGNORE,
    ShardPool,
    coverage,
    draft_vocabulary,
    feature_stats,
    make_batch,
    random_reveal,
    vocab_lookup,
)
from libraspec.train.selfdistill import generate_with_features
from libraspec.train.trainer import (
    TrainConfig,
    block_loss,
    build_drafter,
    calibrate_temperature,
    draw_batch,
    heldout_metrics,
    lr_at,
    make_optimizer,
    train_step,
)

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
VOCAB, MASK, EOS, TAPS, N = 128, 1, 2, (0, 2), 7


@pytest.fixture(scope="module")
def target():
    torch.manual_seed(0)
    cfg = Qwen3Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=VOCAB,
        max_position_embeddings=256,
    )
    return Qwen3ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def pool(target, tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    g = torch.Generator().manual_seed(1)
    for shard in range(2):
        prompts = [
            torch.randint(3, VOCAB, (int(torch.randint(4, 9, (), generator=g)),), generator=g).tolist()
            for _ in range(4)
        ]
        results = generate_with_features(target, prompts, 24, {EOS}, 0, taps=TAPS)
        torch.save(
            {
                "prompt_index": list(range(4)),
                "prompt_len": [len(p) for p in prompts],
                "ids": [torch.tensor(ids, dtype=torch.int32) for ids, _ in results],
                "features": [f for _, f in results],
                "taps": list(TAPS),
            },
            folder / f"shard_{shard:05d}.pt",
        )
    pool = ShardPool(folder)
    assert pool.refresh() > 0 and pool.refresh() == 0  # a second refresh finds nothing new
    return pool


def make(target, vocab=48):
    torch.manual_seed(3)
    return build_drafter(
        target, mask_token_id=MASK, layers=1, block_size=N + 1, taps=TAPS, draft_vocab_size=vocab, init_layers=[3]
    )


def prepared(target, pool, vocab=48):
    drafter = make(target, vocab)
    drafter.set_feature_stats(*feature_stats(pool.sequences))
    drafter.set_draft_vocab(draft_vocabulary(pool.sequences, vocab, [EOS], VOCAB))
    return drafter, vocab_lookup(drafter.draft_vocab_ids, VOCAB)


def test_shard_format_and_vocabulary(pool):
    for s in pool.sequences:
        assert s.features.shape == (len(s.ids) - 1, 64 * len(TAPS))
    ids = draft_vocabulary(pool.sequences, 20, [EOS, 0], VOCAB)
    assert ids[:2].tolist() == [EOS, 0] and ids.unique().numel() == 20
    full = draft_vocabulary(pool.sequences, VOCAB, [EOS], VOCAB)
    assert coverage(pool.sequences, full, VOCAB) == 1.0
    assert 0 < coverage(pool.sequences, ids, VOCAB) <= 1.0


def test_batch_matches_the_engine_pass(pool):
    s = pool.sequences[0]
    lookup = vocab_lookup(torch.arange(VOCAB), VOCAB)
    p = s.prompt_len - 1
    for clean in (0, 3):
        b = make_batch([s], [[p, p + 1]], N, clean, MASK, lookup)
        q = 1 + clean + N
        assert b.block_ids.shape == (1, 2, q) and b.context_limit.tolist() == [[p, p + 1]]
        assert b.block_ids[0, 0, : 1 + clean].tolist() == s.ids[p : p + 1 + clean].tolist()
        assert bool((b.block_ids[0, 0, 1 + clean :] == MASK).all()) and b.mask[0, 0].sum() == N
        want = s.ids[p + 1 + clean : p + q]
        got = b.labels[0, 0, 1 + clean :][: len(want)]
        assert got.tolist() == want.tolist()
        assert bool((b.labels[0, 0, : 1 + clean] == IGNORE).all())
        assert b.block_positions[0, 1].tolist() == list(range(p + 1, p + 1 + q))
    with pytest.raises(ValueError):
        make_batch([s], [[s.prompt_len - 2]], N, 0, MASK, lookup)


def test_revealed_slots_are_the_iterative_drafters_later_pass(target, pool):
    """A revealed slot holds its true token, is clean and has no label; the others stay masked with
    their labels; the drafter's logits at the masked slots equal those of the engine's pass over
    the same partly fixed block (`draft_logits` with an explicit mask); `random_reveal` never shows
    a whole block."""
    drafter, lookup = prepared(target, pool)
    s = pool.sequences[0]
    p = s.prompt_len - 1
    reveal = torch.zeros(1, 2, N, dtype=torch.bool)
    reveal[0, 0, [0, 2]] = True
    b = make_batch([s], [[p, p + 1]], N, 0, MASK, lookup, reveal)
    for slot in (1, 3):  # block positions of mask slots 0 and 2
        assert b.block_ids[0, 0, slot] == s.ids[p + slot] and not b.mask[0, 0, slot]
        assert b.labels[0, 0, slot] == IGNORE
    assert b.mask[0, 0].tolist() == [False, False, True, False] + [True] * (N - 3)
    assert b.labels[0, 0, 2] == lookup[s.ids[p + 2]] and bool((b.block_ids[0, 1, 1:] == MASK).all())
    with torch.no_grad():
        trained = drafter.forward_train(b.features, b.block_ids, b.block_positions, b.context_limit, b.mask)[0, 0]
        cache = drafter.new_cache()
        drafter.extend_context(cache, b.features[:, :p], torch.arange(p))
        engine = drafter.draft_logits(cache, b.block_ids[:, 0], b.block_positions[:, 0], b.mask[:, 0])[0]
    assert torch.allclose(trained[b.mask[0, 0]], engine[b.mask[0, 0]], atol=1e-4)
    shown = random_reveal(torch.Generator().manual_seed(1), 64, 8, N)
    assert not bool(shown.all(-1).any()) and 0.3 < float(shown.float().mean()) < 0.7
    with pytest.raises(ValueError, match="reveal must be"):
        make_batch([s], [[p]], N, 0, MASK, lookup, torch.zeros(1, 1, N + 1, dtype=torch.bool))


def test_loss_decreases_on_a_fixed_batch(target, pool):
    drafter, lookup = prepared(target, pool)
    rng = torch.Generator().manual_seed(0)
    cfg = TrainConfig(lr=3e-3, warmup_steps=1, seqs=4, blocks=6, clean_frac=0.0)
    batch = draw_batch(pool.sequences, rng, cfg, N, MASK, lookup)
    calibrate_temperature(drafter, batch)
    opt = make_optimizer(drafter, cfg)
    first = block_loss(drafter, batch, cfg.gamma)[0].item()
    for _ in range(25):
        train_step(drafter, opt, batch, cfg, cfg.lr)
    assert block_loss(drafter, batch, cfg.gamma)[0].item() < 0.7 * first
    assert drafter.norm.weight.grad is None  # the target's final norm stays frozen
    assert all(p.grad is None for p in target.parameters())


def test_save_reload_identical_logits(target, pool, tmp_path):
    drafter, lookup = prepared(target, pool)
    rng = torch.Generator().manual_seed(1)
    cfg = TrainConfig(warmup_steps=1, seqs=2, blocks=3, clean_frac=1.0)
    opt = make_optimizer(drafter, cfg)
    batch = draw_batch(pool.sequences, rng, cfg, N, MASK, lookup)
    train_step(drafter, opt, batch, cfg, 1e-2)
    drafter.eval()
    drafter.save_pretrained(tmp_path / "d")
    again = DFlashDrafter.from_pretrained(tmp_path / "d", target)
    with torch.no_grad():
        a = drafter.forward_train(
            batch.features, batch.block_ids, batch.block_positions, batch.context_limit, batch.mask
        )
        b = again.forward_train(batch.features, batch.block_ids, batch.block_positions, batch.context_limit, batch.mask)
    assert torch.equal(a, b)


def test_heldout_metrics_are_consistent(target, pool):
    drafter, lookup = prepared(target, pool)
    m = heldout_metrics(drafter, pool.sequences[:3], lookup, stride=2)
    a = m["accept_prefix"]
    assert len(a) == N and all(x >= y for x, y in zip(a, a[1:]))  # P(first k correct) never rises
    assert all(p >= x for p, x in zip(m["slot_acc"], a))
    assert m["tau_static"] == pytest.approx(1 + sum(a), abs=1e-3)


def test_waiting_for_shards_ends(pool, tmp_path):
    from types import SimpleNamespace

    from libraspec.train.__main__ import wait_for_shards

    wait_for_shards(ShardPool(pool.folder), 2, timeout_s=0.0)  # already there: no wait
    with pytest.raises(TimeoutError, match=r"holds 0 of the 1 shard\(s\) needed"):
        wait_for_shards(ShardPool(tmp_path), 1, timeout_s=0.05, poll_s=0.01)
    calls = []  # a generator that writes its first shard during the wait

    def refresh():
        calls.append(1)
        if len(calls) == 3:
            arriving.loaded.add("shard_00000.pt")

    arriving = SimpleNamespace(folder=tmp_path, loaded=set(), refresh=refresh)
    wait_for_shards(arriving, 1, timeout_s=60.0, poll_s=0.001)
    assert len(calls) == 3


def test_lr_schedule():
    cfg = TrainConfig(lr=1.0, warmup_steps=10, decay_from=0.5, min_lr_frac=0.1)
    assert lr_at(cfg, 0, 0.0) == pytest.approx(0.1)
    assert lr_at(cfg, 100, 0.3) == 1.0
    assert lr_at(cfg, 100, 1.0) == pytest.approx(0.1)


def test_evaluation_tables_from_records():
    from test_calibration import record

    from libraspec.train.evaluate import drafter_calibration

    recs = [
        record("static", 0, [0.95, 0.95, 0.95], d=3, accepted=3),
        record("static", 1, [0.05, 0.9, 0.9], d=3, accepted=0),
        record("static", 2, [0.95, 0.05], d=2, accepted=1),
    ]
    out = drafter_calibration(recs, 4)
    assert out["acceptance_by_position"][:3] == pytest.approx([2 / 3, 1 / 3, 1 / 2], abs=1e-3)
    assert out["acceptance_by_position"][3] is None
    # judged tokens: 3 of round 1 (all right), 1 of round 2 (wrong), 2 of round 3 (right, wrong)
    assert sum(row["count"] for row in out["reliability"]) == 6
    top = next(row for row in out["reliability"] if row["bin"] == "0.9-1.0")
    assert top["count"] == 4 and top["accept"] == 1.0
    assert out["ece"] == pytest.approx((4 * 0.05 + 2 * 0.05) / 6, abs=1e-4)
    json.dumps(out, allow_nan=False)  # eval.json stays strict JSON
    assert drafter_calibration([], 2) == {"acceptance_by_position": [None, None], "reliability": [], "ece": None}


def test_temperature_refit_never_raises_the_loss(target, pool):
    from libraspec.train.calibrate import fit_temperature

    drafter, _ = prepared(target, pool)
    with torch.no_grad():
        drafter.log_temperature.fill_(1.5)  # far too soft on purpose
    out = fit_temperature(drafter, pool.sequences, batches=2)
    assert out["nll_after"] <= out["nll_before"] and out["t_after"] < out["t_before"]
    assert drafter.log_temperature.detach().exp().item() == pytest.approx(out["t_after"])


def test_warm_start_into_a_deeper_drafter_starts_as_the_shallow_one(target, pool):
    from libraspec.train.__main__ import warm_start

    shallow, lookup = prepared(target, pool)
    rng = torch.Generator().manual_seed(2)
    cfg = TrainConfig(warmup_steps=1, seqs=2, blocks=3, clean_frac=0.0)
    batch = draw_batch(pool.sequences, rng, cfg, N, MASK, lookup)
    train_step(shallow, make_optimizer(shallow, cfg), batch, cfg, 1e-2)
    deep = build_drafter(
        target, mask_token_id=MASK, layers=2, block_size=N + 1, taps=TAPS, draft_vocab_size=48, init_layers=[2, 3]
    )
    deep.set_draft_vocab(shallow.draft_vocab_ids)
    warm_start(deep, shallow.state_dict())
    shallow.eval(), deep.eval()
    with torch.no_grad():
        args = (batch.features, batch.block_ids, batch.block_positions, batch.context_limit, batch.mask)
        torch.testing.assert_close(deep.forward_train(*args), shallow.forward_train(*args))
    assert deep.layers[1].mlp.down_proj.weight.abs().sum() == 0  # the added layer is the identity
    with pytest.raises(ValueError, match="does not fit"):
        warm_start(shallow, deep.state_dict())


def _evaluated(monkeypatch, prompts, d_max, on_prompt=None):
    """`run_modes` on the tiny pair (n = 7) with a fixed latency profile (none is measured)."""
    from libraspec import profiling
    from libraspec.cost import LatencyProfile
    from libraspec.models.registry import tiny_pair
    from libraspec.train.evaluate import run_modes

    profile = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=7, max_tokens=40)
    monkeypatch.setattr(profiling, "cached_profile", lambda pair, **kwargs: profile)
    return run_modes(tiny_pair("llama", seed=3), prompts, 6, 2.2, d_max, on_prompt=on_prompt)


def test_evaluation_runs_every_mode_prompt_by_prompt(monkeypatch):
    seen = []
    result = _evaluated(
        monkeypatch,
        ["Add 2 and 3.", "Say hi."],
        12,
        on_prompt=lambda partial, done: seen.append((done, len(partial["records"]["libraspec"]))),
    )
    records = result["records"]
    assert list(records) == ["ar", "static_7", "static_12", "libraspec"] and result["n"] == 7
    assert [done for done, _ in seen] == [1, 2] and 0 < seen[0][1] < seen[1][1]  # partial, then all
    tokens = {name: [t for r in recs for t in r.committed_tokens] for name, recs in records.items()}
    assert all(out == tokens["ar"] for out in tokens.values()) and len(tokens["ar"]) == 12  # 6 a prompt
    assert list(_evaluated(monkeypatch, ["Hi."], 7)["records"]) == ["ar", "static_7", "libraspec"]


def test_evaluation_refuses_a_lossy_mode(monkeypatch):
    from libraspec.engine import SpeculativeDecoder

    honest = SpeculativeDecoder.run

    def lossy(self, prompt_ids, mode, policy, config):  # LibraSpec's last token off by one
        for record in honest(self, prompt_ids, mode, policy, config):
            if mode == "libraspec" and record.finished:
                tokens = record.committed_tokens[:-1] + ((record.committed_tokens[-1] + 1) % 256,)
                record = dataclasses.replace(record, committed_tokens=tokens)
            yield record

    monkeypatch.setattr(SpeculativeDecoder, "run", lossy)
    with pytest.raises(RuntimeError, match="differs from AR on prompt 'Hi.'"):
        _evaluated(monkeypatch, ["Hi."], 12)


@pytest.fixture(scope="module")
def v2_pool(target, tmp_path_factory):
    """Ids-only shards (selfdistill --ids-only) turned into feature + top-k shards (features.py)."""
    from libraspec.train.features import featurize_shard
    from libraspec.train.selfdistill import save_shard

    ids_dir, out = tmp_path_factory.mktemp("template_ids"), tmp_path_factory.mktemp("features")
    g = torch.Generator().manual_seed(5)
    prompts = [
        torch.randint(3, VOCAB, (int(torch.randint(4, 9, (), generator=g)),), generator=g).tolist() for _ in range(5)
    ]
    results = generate_with_features(target, prompts, 20, {EOS}, 0, taps=())
    assert all(f is None for _, f in results)
    save_shard(ids_dir / "shard_00000.pt", range(5), prompts, results)
    assert "features" not in torch.load(ids_dir / "shard_00000.pt", weights_only=True)
    tokens, agree = featurize_shard(target, ids_dir / "shard_00000.pt", out / "shard_t_00000.pt", (0, 2, 3), 8, 2, 0)
    assert tokens == sum(len(ids) - len(p) for (ids, _), p in zip(results, prompts)) and agree / tokens > 0.95
    return prompts, results, out, ids_dir


def test_teacher_forced_features_equal_the_decoded_ones(target, v2_pool):
    """One teacher-forced pass gives the features decoding would have captured, and the top-k."""
    prompts, results, out, _ = v2_pool
    decoded = generate_with_features(target, prompts, 20, {EOS}, 0, taps=TAPS)
    data = torch.load(out / "shard_t_00000.pt", weights_only=False)
    assert data["taps"] == [0, 2, 3]
    for (ids, _), (dec_ids, dec_feats), feats, top, probs in zip(
        results, decoded, data["features"], data["topk_ids"], data["topk_probs"]
    ):
        assert dec_ids == ids  # same greedy continuation from the same prompt
        assert feats.shape == (len(ids) - 1, 64 * 3) and top.shape == probs.shape == (len(ids) - 1, 8)
        torch.testing.assert_close(feats[:, :128].float(), dec_feats.float(), atol=2e-2, rtol=1e-2)  # float16
        with torch.no_grad():
            want = torch.softmax(target(torch.tensor([ids])).logits[0, :-1], -1).topk(8, -1)
        assert torch.equal(top.long(), want.indices)
        torch.testing.assert_close(probs.float(), want.values, atol=1e-3, rtol=1e-2)
    picked, full = ShardPool(out, taps=(2, 0)), ShardPool(out)
    assert picked.refresh() == full.refresh() > 0
    for s, whole in zip(picked.sequences, full.sequences):  # columns picked per tap, in that order
        assert torch.equal(s.features, torch.cat([whole.features[:, 64:128], whole.features[:, :64]], -1))
    with pytest.raises(ValueError, match="not \\[5\\]"):
        ShardPool(out, taps=(0, 5)).refresh()


def test_soft_labels_are_the_target_top_k_of_each_slot(target, v2_pool):
    *_, out, ids_dir = v2_pool
    pool = ShardPool(out)
    pool.refresh()
    s = pool.sequences[0]
    lookup = vocab_lookup(torch.arange(VOCAB), VOCAB)
    p = s.prompt_len - 1
    b = make_batch([s], [[p]], N, 2, MASK, lookup)
    assert b.soft_ids.shape == (1, 1, 1 + 2 + N, 8)
    assert bool((b.soft_ids[0, 0, :3] == IGNORE).all()) and float(b.soft_probs[0, 0, :3].sum()) == 0
    for slot in range(3, 3 + N):
        t = p + slot  # the slot's position; its label is ids[t], predicted after position t - 1
        if t < len(s.ids):
            assert b.soft_ids[0, 0, slot].tolist() == s.topk_ids[t - 1].tolist()
            assert b.labels[0, 0, slot] == s.ids[t] == s.topk_ids[t - 1, 0]  # greedy: the argmax
        else:
            assert float(b.soft_probs[0, 0, slot].sum()) == 0
    small = vocab_lookup(torch.arange(0, VOCAB, 2), VOCAB)  # odd ids fall outside V_d: weight 0
    sb = make_batch([s], [[p]], N, 0, MASK, small)
    assert bool(((sb.soft_ids == IGNORE) == (sb.soft_probs == 0)).all())
    with pytest.raises(ValueError, match="ids-only"):
        ShardPool(ids_dir).refresh()


def test_distillation_loss_mixes_hard_and_soft_labels(target, v2_pool):
    out = v2_pool[2]
    pool = ShardPool(out, taps=TAPS)
    pool.refresh()
    drafter, lookup = prepared(target, pool)
    rng = torch.Generator().manual_seed(4)
    cfg = TrainConfig(warmup_steps=1, seqs=2, blocks=4, clean_frac=0.0)
    batch = draw_batch(pool.sequences, rng, cfg, N, MASK, lookup)
    hard, hard_stats = block_loss(drafter, batch, cfg.gamma, 0.0)
    soft_only, stats = block_loss(drafter, batch, cfg.gamma, 1.0)
    half, _ = block_loss(drafter, batch, cfg.gamma, 0.5)
    assert "soft_ce" not in hard_stats and stats["soft_ce"] == pytest.approx(soft_only.item())
    assert half.item() == pytest.approx(0.5 * hard.item() + 0.5 * soft_only.item(), rel=1e-5)
    one_hot = dataclasses.replace(
        batch, soft_ids=batch.labels[..., None].clone(), soft_probs=(batch.labels[..., None] != IGNORE).float()
    )
    assert block_loss(drafter, one_hot, cfg.gamma, 1.0)[0].item() == pytest.approx(hard.item(), rel=1e-5)
    distilled = dataclasses.replace(cfg, distill=0.5, lr=3e-3)
    opt = make_optimizer(drafter, distilled)
    for _ in range(20):
        train_step(drafter, opt, batch, distilled, distilled.lr)
    assert block_loss(drafter, batch, cfg.gamma, 1.0)[0].item() < soft_only.item()


def test_magpie_sampling_is_seeded_and_stops_at_the_stop_id(target):
    from libraspec.train.magpie import sample_user_turns

    runs = [
        sample_user_turns(target, [5, 6, 7], 6, 12, {EOS, 9}, 1.0, 0.9, torch.Generator().manual_seed(3))
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and len(runs[0]) == 6
    for ids, finished in runs[0]:
        assert not set(ids) & {EOS, 9} and (finished or len(ids) == 12)
    with torch.no_grad():  # the first sampled token of row 0 follows the model's distribution at the prefix
        first = sample_user_turns(target, [5, 6, 7], 400, 1, {EOS}, 1.0, 1.0, torch.Generator().manual_seed(0))
        probs = torch.softmax(target(torch.tensor([[5, 6, 7]])).logits[0, -1], -1)
    counts = torch.bincount(torch.tensor([ids[0] if ids else EOS for ids, _ in first]), minlength=VOCAB).float()
    assert float((counts / 400 - probs).abs().max()) < 0.06


def test_warm_start_with_an_added_tap_starts_with_the_same_logits(target, pool, v2_pool, tmp_path):
    """A drafter reading taps (0, 2) warm-starts one that also reads tap 3: zero fc columns for it."""
    from libraspec.train.__main__ import init_source, warm_start

    out = v2_pool[2]
    two, three = ShardPool(out, taps=TAPS), ShardPool(out, taps=(0, 2, 3))
    two.refresh(), three.refresh()
    old, lookup = prepared(target, two)
    rng = torch.Generator().manual_seed(2)
    cfg = TrainConfig(warmup_steps=1, seqs=2, blocks=3, clean_frac=0.0)
    train_step(old, make_optimizer(old, cfg), draw_batch(two.sequences, rng, cfg, N, MASK, lookup), cfg, 1e-2)
    old.save_pretrained(tmp_path / "old")
    weights, taps = init_source(tmp_path / "old", target)
    assert taps == list(TAPS)
    new = build_drafter(
        target, mask_token_id=MASK, layers=1, block_size=N + 1, taps=(0, 2, 3), draft_vocab_size=48, init_layers=[3]
    )
    new.set_draft_vocab(old.draft_vocab_ids)
    warm_start(new, weights, taps, feature_stats(three.sequences))
    assert float(new.fc.weight.detach()[:, 128:].abs().sum()) == 0
    torch.testing.assert_close(new.feature_std[128:], feature_stats(three.sequences)[1][128:].clamp(min=1e-4))
    rng = torch.Generator().manual_seed(3)
    b3 = draw_batch(three.sequences, rng, cfg, N, MASK, lookup)
    b2 = dataclasses.replace(b3, features=b3.features[..., :128])  # the same blocks, the old taps' columns
    old.eval(), new.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            new.forward_train(b3.features, b3.block_ids, b3.block_positions, b3.context_limit, b3.mask),
            old.forward_train(b2.features, b2.block_ids, b2.block_positions, b2.context_limit, b2.mask),
        )
    with pytest.raises(ValueError, match="lack some"):
        warm_start(old, new.state_dict(), [0, 2, 3])


def test_suite_table_has_a_row_per_suite_and_the_pool(monkeypatch):
    from libraspec.train.evaluate import suite_prompts, suite_table, summarize_eval
    from libraspec.train.prompts import heldout_prompts

    summary = summarize_eval(_evaluated(monkeypatch, ["Add 2 and 3."], 12), 2.2, 12)
    summary["prompts"] = 1
    text = suite_table({"gsm8k": summary, "heldout": summary}, {**summary, "prompts": 2})
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r.split(" | ")[0] for r in rows] == ["| gsm8k", "| heldout", "| all"]
    best = max((m["speedup_measured"], k) for k, m in summary["modes"].items() if k.startswith("static_"))
    assert f"{best[0]:.3f}x ({best[1].replace('_', ' d = ')})" in rows[0]
    assert f"{summary['modes']['libraspec']['speedup_measured']:.3f}x" in rows[0]
    source, prompts = suite_prompts("heldout")
    assert prompts == heldout_prompts()[32:] and source == "held-out prompts 33-64"  # not the monitor's 32
    assert suite_prompts("math")[1][:1] and suite_prompts("math")[0].endswith("math.jsonl")
    with pytest.raises(FileNotFoundError, match="not found"):
        suite_prompts("no-such-suite")


def test_the_look_up_drafters_held_apart_answers_are_never_trained_on(tmp_path):
    from libraspec.train.data import held_apart

    def shard(name, source, indices):
        ids = [torch.arange(3 + i, 10 + i, dtype=torch.int32) for i in indices]
        torch.save(
            {
                "prompt_index": indices,
                "prompt_len": [2] * len(indices),
                "ids": ids,
                "features": [torch.zeros(len(x) - 1, 4) for x in ids],
                "taps": [0],
                "source": f"assets/selfgen/{source}/{name}",
            },
            tmp_path / f"shard_{source}_{name}",
        )

    shard("00000.pt", "magpie_ids", list(range(10)))
    shard("00001.pt", "template_ids", list(range(10)))
    pool = ShardPool(tmp_path)
    assert pool.refresh() == 18  # all but Magpie prompts 0 and 8
    assert [(s.source, s.prompt_index) for s in pool.held_apart] == [("magpie_ids", 0), ("magpie_ids", 8)]
    assert not any(held_apart(s.source, s.prompt_index) for s in pool.sequences)
    assert sum(s.source == "template_ids" for s in pool.sequences) == 10  # the rule is the Magpie source's only
