"""DFlash drafter: checkpoint format, cache invariants, train/inference agreement, extensions.

Tiny random targets built from configs (hidden 64, 4 layers, vocab 128); nothing is downloaded.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from libraspec.models.dflash import DFlashConfig, DFlashDrafter, default_target_layer_ids

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
VOCAB, HIDDEN, MASK = 128, 64, 127
EXT_ON = dict(slot_embeddings=True, learned_temperature=True, feature_stats=True, draft_vocab_size=40)


def qwen3_target(vocab=VOCAB, hidden=HIDDEN, seed=0):
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        hidden_size=hidden,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=vocab,
        max_position_embeddings=256,
    )
    return Qwen3ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def target():
    return qwen3_target()


def make_drafter(target, seed=1, block_size=8, **ext):
    torch.manual_seed(seed)
    cfg = DFlashConfig.from_target_config(
        target.config, block_size=block_size, num_hidden_layers=2, target_layer_ids=[0, 2], mask_token_id=MASK, **ext
    )
    drafter = DFlashDrafter(cfg, target.get_input_embeddings(), target.get_output_embeddings()).eval()
    with torch.no_grad():  # non-trivial extension state, so that saving/loading it is tested
        if cfg.learned_temperature:
            drafter.log_temperature.fill_(0.3)
        if cfg.feature_stats:
            drafter.set_feature_stats(torch.randn(drafter.feature_dim) * 0.1, torch.rand(drafter.feature_dim) + 0.5)
        if cfg.draft_vocab_size:
            drafter.set_draft_vocab(torch.randperm(VOCAB)[: cfg.draft_vocab_size])
    return drafter


def features_of(target, drafter, batch=1, length=20, seed=2):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, MASK, (batch, length), generator=g)
    with torch.no_grad():
        out = target(ids, output_hidden_states=True)
    return drafter.target_features(out.hidden_states)  # (B, T, 2 * H)


def block(anchor, n_masks, clean=()):
    return torch.tensor([[anchor, *clean] + [MASK] * n_masks])


def logits_after_context(drafter, feats, ids, start):
    cache = drafter.new_cache()
    drafter.extend_context(cache, feats[:, :start], torch.arange(start))
    return drafter.draft_logits(cache, ids, torch.arange(start, start + ids.shape[1]))


# ---- checkpoint format -------------------------------------------------------------


@pytest.mark.parametrize("ext", [{}, EXT_ON], ids=["plain", "extensions"])
def test_save_reload_identical_and_unprefixed(target, tmp_path, ext):
    drafter = make_drafter(target, **ext)
    feats = features_of(target, drafter)
    ids = block(5, 7)
    path = tmp_path / "drafter"
    drafter.save_pretrained(path)
    drafter.save_pretrained(path)  # overwriting an existing checkpoint works too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drafter"]  # no temp leftovers
    reloaded = DFlashDrafter.from_pretrained(path, target)
    with torch.no_grad():
        assert torch.equal(
            logits_after_context(drafter, feats, ids, 12), logits_after_context(reloaded, feats, ids, 12)
        )
    keys = set(load_file(str(path / "model.safetensors")))
    assert {
        "fc.weight",
        "hidden_norm.weight",
        "norm.weight",
        "layers.1.self_attn.q_proj.weight",
        "layers.0.self_attn.k_norm.weight",
        "layers.0.mlp.down_proj.weight",
    } <= keys
    assert not any(k.startswith("model.") or "embed_tokens" in k or "lm_head" in k for k in keys)
    extra = {"slot_embeddings", "log_temperature", "feature_mean", "feature_std", "draft_vocab_ids"}
    assert (extra <= keys) == bool(ext) and (extra & keys == set()) == (not ext)
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["block_size"] == 8 and cfg["dflash_config"] == {"target_layer_ids": [0, 2], "mask_token_id": MASK}
    assert ("libraspec_config" in cfg) == bool(ext)


def test_bad_checkpoint_names_the_key(target, tmp_path):
    path = tmp_path / "d"
    make_drafter(target).save_pretrained(path)
    good = load_file(str(path / "model.safetensors"))
    cases = [
        ({**{k: v for k, v in good.items() if k != "fc.weight"}}, "fc.weight"),
        ({**good, "layers.0.self_attn.bogus.weight": torch.zeros(2)}, "bogus"),
        ({**good, "norm.weight": torch.ones(HIDDEN + 1)}, "norm.weight"),
    ]
    for state, key in cases:
        save_file(state, str(path / "model.safetensors"))
        with pytest.raises(ValueError, match=key.replace(".", r"\.")):
            DFlashDrafter.from_pretrained(path, target)


def test_target_mismatch_fails_clearly(target, tmp_path):
    path = tmp_path / "d"
    make_drafter(target).save_pretrained(path)
    with pytest.raises(ValueError, match="vocab_size"):
        DFlashDrafter.from_pretrained(path, qwen3_target(vocab=96))
    with pytest.raises(ValueError, match="hidden_size"):
        DFlashDrafter.from_pretrained(path, qwen3_target(hidden=32))
    cfg = make_drafter(target).config
    with pytest.raises(ValueError, match="embeddings"):
        DFlashDrafter(cfg, torch.nn.Embedding(VOCAB + 1, HIDDEN), target.get_output_embeddings())


def zlab_style_config(**changes):
    """A config shaped like z-lab's published b16 ones (Qwen3 keys + DFlash keys), scaled down."""
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "block_size": 16,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "dflash_config": {"mask_token_id": 100, "target_layer_ids": [1, 2]},
        "dtype": "bfloat16",
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": 96,
        "layer_types": ["full_attention"] * 2,
        "max_position_embeddings": 40960,
        "max_window_layers": 2,
        "model_type": "qwen3",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "num_target_layers": 4,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
    }
    cfg.update(changes)
    return cfg


def test_zlab_shaped_checkpoint_loads(target, tmp_path):
    raw = zlab_style_config()
    cfg = DFlashConfig.from_dict(raw)
    state = DFlashDrafter(cfg, target.get_input_embeddings(), target.get_output_embeddings()).state_dict()
    path = tmp_path / "zlab"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(raw))
    save_file({k: v.to(torch.bfloat16) for k, v in state.items()}, str(path / "model.safetensors"))
    drafter = DFlashDrafter.from_pretrained(path, target)
    assert drafter.block_size == 16 and drafter.target_layer_ids == [1, 2] and drafter.mask_token_id == 100
    assert drafter.config.intermediate_size == 96 and drafter.config.rope_theta == 1e6
    out = drafter.config.to_dict()
    assert out["auto_map"] == raw["auto_map"] and out["dflash_config"] == raw["dflash_config"]
    assert "libraspec_config" not in out and DFlashConfig.from_dict(out) == cfg
    no_ids = zlab_style_config(dflash_config={"mask_token_id": 100})
    assert DFlashConfig.from_dict(no_ids).target_layer_ids == default_target_layer_ids(4, 2)
    with pytest.raises(ValueError, match="mask_token_id"):
        DFlashConfig.from_dict(zlab_style_config(dflash_config={}))
    with pytest.raises(ValueError, match="rope type"):
        DFlashConfig.from_dict(zlab_style_config(rope_scaling={"rope_type": "yarn", "factor": 4.0}))
    with pytest.raises(ValueError, match="libraspec_config"):
        DFlashConfig.from_dict(zlab_style_config(libraspec_config={"bogus": 1}))
    v5 = {k: v for k, v in zlab_style_config().items() if k != "rope_theta"}
    v5["rope_parameters"] = {"rope_type": "default", "rope_theta": 5000.0}
    assert DFlashConfig.from_dict(v5).rope_theta == 5000.0


def test_default_target_layer_ids():
    assert default_target_layer_ids(36, 1) == [18] and default_target_layer_ids(4, 1) == [2]
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]  # DFlash's spread over layers 1..L-3
    for layers in range(1, 40):
        for count in range(1, layers + 1):
            ids = default_target_layer_ids(layers, count)
            assert len(ids) == count and ids == sorted(set(ids)) and 0 <= ids[0] and ids[-1] < layers
    with pytest.raises(ValueError):
        default_target_layer_ids(4, 5)


def test_target_features_pick_layer_plus_one(target):
    drafter = make_drafter(target)
    with torch.no_grad():
        hs = target(torch.tensor([[3, 4, 5]]), output_hidden_states=True).hidden_states
    assert torch.equal(drafter.target_features(hs), torch.cat([hs[1], hs[3]], dim=-1))
    with pytest.raises(ValueError, match="hidden states"):
        drafter.target_features(hs[:-1])


# ---- cache invariants and the training path ------------------------------------------


@pytest.mark.parametrize("ext", [{}, EXT_ON], ids=["plain", "extensions"])
def test_context_chunks_crop_and_no_mutation(target, ext):
    drafter = make_drafter(target, **ext)
    feats = features_of(target, drafter)
    ids, pos = block(9, 7), torch.arange(15, 23)
    with torch.no_grad():
        whole = drafter.new_cache()
        drafter.extend_context(whole, feats[:, :15], torch.arange(15))
        ref = drafter.draft_logits(whole, ids, pos)
        assert whole.length == 15 and torch.equal(drafter.draft_logits(whole, ids, pos), ref)
        parts = drafter.new_cache()
        drafter.extend_context(parts, feats[:, :6], torch.arange(6))
        drafter.extend_context(parts, feats[:, 6:15], torch.arange(6, 15)[None])
        torch.testing.assert_close(drafter.draft_logits(parts, ids, pos), ref)
        drafter.extend_context(parts, feats[:, 15:19], torch.arange(15, 19))
        assert not torch.allclose(drafter.draft_logits(parts, ids, pos), ref)
        drafter.crop(parts, 10)
        drafter.extend_context(parts, feats[:, 10:15], torch.arange(10, 15))
        torch.testing.assert_close(drafter.draft_logits(parts, ids, pos), ref)
    with pytest.raises(ValueError, match="crop"):
        drafter.crop(parts, 16)
    with pytest.raises(ValueError, match="positions"):
        drafter.draft_logits(parts, ids, torch.arange(3))
    with pytest.raises(ValueError, match="features"):
        drafter.extend_context(parts, feats[..., :HIDDEN], torch.arange(20))


@pytest.mark.parametrize("ext", [{}, EXT_ON], ids=["plain", "extensions"])
def test_forward_train_equals_draft_logits(target, ext):
    drafter = make_drafter(target, **ext)
    feats = features_of(target, drafter, batch=2, length=24)
    anchors = torch.tensor([[3, 10, 17], [0, 8, 16]])  # context of block k = positions < anchor
    q = 12
    blocks = torch.full((2, 3, q), MASK)
    blocks[..., 0] = torch.tensor([[4, 5, 6], [7, 8, 9]])
    blocks[0, 1, 1:5] = torch.tensor([20, 21, 22, 23])  # clean drafts fed back in, then masks
    positions = anchors[..., None] + torch.arange(q)
    with torch.no_grad():
        train = drafter.forward_train(feats, blocks, positions, anchors)
        assert train.shape == (2, 3, q, drafter.config.draft_vocab_size or VOCAB)
        for b in range(2):
            for k in range(3):
                start = int(anchors[b, k])
                cache = drafter.new_cache()
                if start:
                    drafter.extend_context(cache, feats[b : b + 1, :start], torch.arange(start))
                infer = drafter.draft_logits(cache, blocks[b : b + 1, k], positions[b, k])
                torch.testing.assert_close(train[b, k], infer[0], atol=2e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="context_limit"):
        drafter.forward_train(feats, blocks, positions, anchors + 100)


def test_forward_train_gradients_match_finite_differences(target):
    """The training forward's gradients are the loss's derivatives: along a random direction in the
    fusion layer's and the slot embeddings' weights, autograd equals a central difference (float64
    copies); a hook that halves a gradient fails the same check. The shared embeddings and head stay
    the target's."""
    import copy

    target64 = copy.deepcopy(target).double()
    drafter = make_drafter(target64, **EXT_ON).double().train()
    feats = features_of(target64, drafter, length=12)
    blocks = torch.full((1, 2, 8), MASK)
    blocks[..., 0] = 3
    positions, anchors = torch.tensor([[4, 9]])[..., None] + torch.arange(8), torch.tensor([[4, 9]])

    def loss() -> torch.Tensor:
        return drafter.forward_train(feats, blocks, positions, anchors).logsumexp(-1).sum()

    def mismatch(weight: torch.Tensor) -> float:
        """|autograd - central difference| / |central difference| along one random direction."""
        drafter.zero_grad()
        loss().backward()
        direction = torch.randn(weight.shape, generator=torch.Generator().manual_seed(0), dtype=weight.dtype)
        analytic = float((weight.grad * direction).sum())
        eps = 1e-4
        with torch.no_grad():
            weight.add_(eps * direction)
            up = float(loss())
            weight.sub_(2 * eps * direction)
            down = float(loss())
            weight.add_(eps * direction)
        numeric = (up - down) / (2 * eps)
        return abs(analytic - numeric) / abs(numeric)

    for weight in (drafter.fc.weight, drafter.slot_embeddings):
        assert mismatch(weight) < 2e-3  # RMSNorm computes in float32 (as Qwen3): about 2e-4 seen
    handle = drafter.fc.weight.register_hook(lambda grad: grad * 0.5)  # a planted bug: half the gradient
    assert mismatch(drafter.fc.weight) > 0.4
    handle.remove()
    owned = {id(p) for p in drafter.parameters()}  # shared embeddings/head are the target's, not trained here
    assert id(target64.get_output_embeddings().weight) not in owned
    assert id(target64.get_input_embeddings().weight) not in owned


def test_neutral_extensions_equal_plain(target):
    plain = make_drafter(target)
    ext = make_drafter(target, learned_temperature=True, feature_stats=True, feature_clip=1e6)
    ext.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        ext.log_temperature.zero_()
        ext.set_feature_stats(torch.zeros(ext.feature_dim), torch.ones(ext.feature_dim))
        feats, ids = features_of(target, plain), block(5, 7)
        ref = logits_after_context(plain, feats, ids, 12)
        torch.testing.assert_close(logits_after_context(ext, feats, ids, 12), ref)
        ext.log_temperature.fill_(math.log(2.0))
        torch.testing.assert_close(logits_after_context(ext, feats, ids, 12), ref / 2)
        ext.config.feature_clip = 0.5  # huge features are clipped to the same fused context
        scaled = feats.sign() * 1000
        torch.testing.assert_close(ext.fuse_context(scaled), ext.fuse_context(scaled * 3))


def test_slot_embeddings_follow_mask_runs(target):
    drafter = make_drafter(target, block_size=4, slot_embeddings=True)
    emb, slots = target.get_input_embeddings().weight, drafter.slot_embeddings
    ids = torch.tensor([[7, MASK, MASK, 9, MASK, MASK, MASK, MASK]])
    expected = torch.stack(
        [
            emb[7] + slots[0],
            emb[MASK] + emb[7] + slots[1],
            emb[MASK] + emb[7] + slots[2],
            emb[9] + slots[0],
            emb[MASK] + emb[9] + slots[1],
            emb[MASK] + emb[9] + slots[2],
            emb[MASK] + emb[9] + slots[3],
            emb[MASK] + emb[9] + slots[3],  # runs longer than block_size - 1 reuse the last slot
        ]
    )
    torch.testing.assert_close(drafter.embed_block(ids)[0], expected)
    no_anchor = drafter.embed_block(torch.tensor([[MASK, 7]]))[0]  # a run with nothing before it
    torch.testing.assert_close(no_anchor[0], emb[MASK] + slots[1])
    explicit = torch.tensor([[False, True, True, False, False, False, False, False]])
    plain_tail = drafter.embed_block(ids, mask=explicit)[0, 4]  # MASK id treated as a clean token
    torch.testing.assert_close(plain_tail, emb[MASK] + slots[0])


def test_draft_vocab_mapping(target):
    full = make_drafter(target)
    small = make_drafter(target, draft_vocab_size=40)
    small.load_state_dict(full.state_dict(), strict=False)
    vocab = small.draft_vocab_ids
    feats, ids = features_of(target, full), block(5, 7)
    with torch.no_grad():
        ref = logits_after_context(full, feats, ids, 12)
        logits = logits_after_context(small, feats, ids, 12)
    assert logits.shape == (1, 8, 40)
    torch.testing.assert_close(logits, ref[..., vocab])
    assert torch.equal(small.to_target_ids(torch.arange(40)), vocab)
    assert torch.equal(full.to_target_ids(torch.arange(40)), torch.arange(40))
    probs = small.to_full_vocab(torch.softmax(logits / 0.7, -1))
    assert probs.shape == (1, 8, VOCAB)
    torch.testing.assert_close(probs.sum(-1), torch.ones(1, 8))
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[vocab] = False
    assert probs[..., outside].abs().max() == 0
    torch.testing.assert_close(probs[..., vocab], torch.softmax(logits / 0.7, -1))
    tokens, q = small.propose(logits)
    assert torch.isin(tokens, vocab).all()
    torch.testing.assert_close(q, torch.softmax(logits, -1).max(-1).values)
    g = torch.Generator().manual_seed(0)
    tokens, q = small.propose(logits, temperature=0.7, generator=g)
    torch.testing.assert_close(q, probs.gather(-1, tokens[..., None])[..., 0])
    with pytest.raises(ValueError, match="distinct"):
        small.set_draft_vocab(torch.zeros(40))
    with pytest.raises(ValueError, match="draft_vocab_size"):
        small.set_draft_vocab(torch.arange(39))


@pytest.mark.parametrize("kind", ["qwen3", "llama"])
def test_init_from_target_starts_as_identity(target, kind):
    if kind == "llama":
        torch.manual_seed(0)
        target = LlamaForCausalLM(
            LlamaConfig(
                hidden_size=HIDDEN,
                intermediate_size=128,
                num_hidden_layers=4,
                num_attention_heads=4,
                num_key_value_heads=2,
                vocab_size=VOCAB,
            )
        ).eval()
    drafter = make_drafter(target, slot_embeddings=True)
    copied = drafter.init_from_target(target, [1, 3])
    src = target.model.layers[3]
    assert torch.equal(drafter.layers[1].self_attn.q_proj.weight, src.self_attn.q_proj.weight)
    assert torch.equal(drafter.layers[1].mlp.up_proj.weight, src.mlp.up_proj.weight)
    assert "layers.1.self_attn.k_proj.weight" in copied and "norm.weight" in copied
    assert ("layers.0.self_attn.q_norm.weight" in copied) == (kind == "qwen3")
    assert drafter.layers[0].self_attn.o_proj.weight.abs().max() == 0
    assert drafter.layers[0].mlp.down_proj.weight.abs().max() == 0
    feats, ids = features_of(target, drafter), block(5, 7)
    with torch.no_grad():  # zero o_proj/down_proj: the layer stack passes the block inputs through
        expected = drafter.head(drafter.embed_block(ids))
        torch.testing.assert_close(logits_after_context(drafter, feats, ids, 12), expected)
    with pytest.raises(ValueError, match="target layer ids"):
        drafter.init_from_target(target, [1])


def test_config_rejects_bad_values(target):
    with pytest.raises(ValueError, match="unknown drafter extensions"):
        DFlashConfig.from_target_config(target.config, bogus=True)
    with pytest.raises(ValueError, match="target_layer_ids"):
        DFlashConfig.from_target_config(target.config, target_layer_ids=[4])
    with pytest.raises(ValueError, match="block_size"):
        DFlashConfig.from_target_config(target.config, block_size=1)
    cfg = DFlashConfig.from_target_config(target.config)
    assert cfg.mask_token_id == VOCAB - 1 and cfg.target_layer_ids == [2] and cfg.block_size == 16
