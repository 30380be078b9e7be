"""Hub pairs offline: tiny checkpoints in the published formats load through the hub code path.

A tiny random Qwen3 target (save_pretrained + a byte-level tokenizer with a Qwen3-like chat
template that honours enable_thinking) and a tiny drafter in z-lab's DFlash b16 layout
(block_size 16, so n = 15) are written to tmp folders; `load_pair` receives a resolver
that maps the real repository ids to those folders, so everything after the download is
the code a GPU Space runs. Invariant: greedy LibraSpec and static decoding equal AR.
"""

from __future__ import annotations

import gc
import json
import weakref

import pytest
import torch
from safetensors.torch import save_file

from libraspec.cost import LatencyProfile
from libraspec.engine import DecodeConfig, SpeculativeDecoder
from libraspec.models import registry
from libraspec.models.dflash import DFlashConfig, DFlashDrafter
from libraspec.models.registry import HUB_PAIRS, HubUnavailableError, load_pair
from libraspec.models.shapes import byte_level_tokenizer
from libraspec.policy import LibraSpecPolicy, StaticPolicy

LAYER = "unit"  # tests/conftest.py

torch.set_num_threads(1)
TARGET_LAYERS, EXTRA_ROWS = 6, 3  # Qwen3 pads its embedding matrix beyond the tokenizer; so do we
PROFILE = LatencyProfile.from_linear(t0=0.05, c=0.004, draft_per_block=0.01, n=15, max_tokens=40)
THINK_OFF = "<think>\n\n</think>\n\n"


def zlab_drafter_config(vocab: int, mask_id: int) -> dict:
    """z-lab's published Qwen3 b16 drafter config.json keys, scaled down."""
    return {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "block_size": 16,
        "bos_token_id": None,
        "dflash_config": {"mask_token_id": mask_id, "target_layer_ids": [1, 4]},
        "dtype": "bfloat16",
        "eos_token_id": 2,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 96,
        "layer_types": ["full_attention"] * 2,
        "max_position_embeddings": 40960,
        "max_window_layers": 2,
        "model_type": "qwen3",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "num_target_layers": TARGET_LAYERS,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "transformers_version": "4.57.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab,
    }


@pytest.fixture(scope="module")
def hub_folders(tmp_path_factory):
    """{repo id: folder} for the 4B pair's two repositories, built offline."""
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tokenizer = byte_level_tokenizer()
    vocab = len(tokenizer) + EXTRA_ROWS
    im_end, eot = (tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>"))
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=TARGET_LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=eot,
        eos_token_id=im_end,
        pad_token_id=eot,
    )
    target = Qwen3ForCausalLM(config).eval()
    target.generation_config = GenerationConfig(eos_token_id=[im_end, eot], pad_token_id=eot)
    spec = HUB_PAIRS["qwen3-4b-dflash"]
    target_dir = tmp_path_factory.mktemp("qwen3-target")
    target.save_pretrained(target_dir)
    tokenizer.save_pretrained(target_dir)
    raw = zlab_drafter_config(vocab, mask_id=len(tokenizer))  # like <|MASK|>: past the tokenizer's ids
    torch.manual_seed(1)
    drafter = DFlashDrafter(DFlashConfig.from_dict(raw), target.get_input_embeddings(), target.get_output_embeddings())
    drafter_dir = tmp_path_factory.mktemp("dflash-drafter")
    (drafter_dir / "config.json").write_text(json.dumps(raw))
    save_file(
        {k: v.to(torch.bfloat16).contiguous() for k, v in drafter.state_dict().items()},
        str(drafter_dir / "model.safetensors"),
        metadata={"format": "pt"},
    )
    (drafter_dir / "dflash.py").write_text("raise RuntimeError('remote code must never run')\n")
    return {spec.target_repo: target_dir, spec.drafter_repo: drafter_dir}


@pytest.fixture(scope="module")
def pair(hub_folders):
    return load_pair("qwen3-4b-dflash", device="cpu", dtype=torch.float64, resolver=hub_folders.__getitem__)


def generated(records):
    return [t for r in records for t in r.committed_tokens]


def test_hub_pair_loads_the_published_layout(pair, hub_folders):
    assert pair.name == "qwen3-4b-dflash" and pair.n == 15
    assert pair.drafter.mask_token_id == pair.target.vocab_size - EXTRA_ROWS
    assert pair.drafter.target_layer_ids == [1, 4] and pair.drafter.config.extra["auto_map"]
    assert pair.target.dtype == torch.float64 and next(pair.drafter.parameters()).dtype == torch.float64
    assert pair.target.model.config._attn_implementation == "sdpa"
    tokenizer = pair.tokenizer
    assert pair.stop_ids == {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    assert pair.drafter_id.startswith("z-lab/Qwen3-4B-DFlash-b16@")


def test_chat_prompt_disables_thinking(pair):
    text = "Why is the sky blue? 🌅 שלום"
    ids = pair.encode_prompt(text)
    rendered = pair.tokenizer.decode(ids)
    assert rendered.startswith("<|im_start|>user\n" + text + "<|im_end|>")
    assert rendered.endswith("<|im_start|>assistant\n" + THINK_OFF)
    thinking = registry.chat_template_ids(pair.tokenizer, text)  # the template's default: no empty think block
    assert pair.tokenizer.decode(thinking).endswith("<|im_start|>assistant\n") and len(thinking) < len(ids)


def test_greedy_libraspec_equals_ar_on_the_hub_pair(pair):
    decoder = SpeculativeDecoder(pair, PROFILE)
    for prompt in ("Count to five.", "Write <b>HTML</b> & more"):
        ids = pair.encode_prompt(prompt)
        config = DecodeConfig(max_new_tokens=40, lookahead=24)
        reference = generated(decoder.run(ids, "ar", None, config))
        assert 1 <= len(reference) <= 40
        records = list(decoder.run(ids, "libraspec", LibraSpecPolicy(2.2, 24), config))
        assert generated(records) == reference
        assert all(r.blocks_drafted >= 1 and len(r.confidences) == 15 * r.blocks_drafted for r in records)
        assert generated(decoder.run(ids, "static", StaticPolicy(15), config)) == reference
        assert isinstance(pair.decode(reference), str)


def test_8b_pair_uses_the_same_loader(hub_folders):
    spec = HUB_PAIRS["qwen3-8b-dflash"]
    assert (spec.target_repo, spec.drafter_repo) == ("Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16")
    same_files = {
        spec.target_repo: hub_folders["Qwen/Qwen3-4B"],
        spec.drafter_repo: hub_folders["z-lab/Qwen3-4B-DFlash-b16"],
    }
    pair = load_pair("qwen3-8b-dflash", device="cpu", dtype=torch.float32, resolver=same_files.__getitem__)
    assert pair.name == "qwen3-8b-dflash" and pair.chat_kwargs == {"enable_thinking": False}


def test_offline_without_a_cached_copy_says_how_to_predownload(monkeypatch, tmp_path):
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(HubUnavailableError, match="needs Qwen/Qwen3-4B from the Hugging Face Hub") as info:
        load_pair("qwen3-4b-dflash", device="cpu")
    message = str(info.value)
    assert "HF_HUB_OFFLINE=1" in message and 'hf download Qwen/Qwen3-4B --include "*.json"' in message
    assert isinstance(info.value, OSError)  # the app shows OSErrors as load errors


def test_failed_download_is_a_clear_error(monkeypatch):
    import huggingface_hub

    def refuse(repo_id, **kwargs):
        assert kwargs["allow_patterns"] == registry.HUB_FILES and not kwargs["local_files_only"]
        raise OSError("Network is unreachable")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    with pytest.raises(HubUnavailableError, match="downloading it failed .*Network is unreachable"):
        registry.hub_folder("z-lab/Qwen3-8B-DFlash-b16")


def test_names_env_and_descriptions(monkeypatch):
    assert {"smollm2-135m", "tiny-llama", "qwen3-4b-dflash", "qwen3-8b-dflash"} <= set(registry.available_pairs())
    for name in registry.available_pairs():
        assert registry.describe_pair(name)
    with pytest.raises(ValueError, match="unknown model pair 'gpt-5'"):
        load_pair("gpt-5")
    with pytest.raises(ValueError, match="unknown model pair"):
        registry.describe_pair("")
    with pytest.raises(ValueError, match="resolver only applies to hub pairs"):
        load_pair("tiny-llama", resolver=str)
    monkeypatch.setenv("LIBRASPEC_MODEL", "tiny-qwen3")
    assert registry.selected_pair() == "tiny-qwen3" and load_pair().name == "tiny-qwen3"


# ---- choosing a pair: env, session, app dropdown -------------------------------------------


def test_offered_pairs_follow_the_environment(monkeypatch):
    monkeypatch.delenv("LIBRASPEC_MODEL", raising=False)
    monkeypatch.delenv("LIBRASPEC_PAIRS", raising=False)
    assert registry.offered_pairs() == ["smollm2-135m"]
    monkeypatch.setenv("LIBRASPEC_PAIRS", "qwen3-4b-dflash, qwen3-8b-dflash,qwen3-4b-dflash")
    assert registry.offered_pairs() == ["qwen3-4b-dflash", "qwen3-8b-dflash"]
    monkeypatch.setenv("LIBRASPEC_MODEL", "tiny-llama")
    assert registry.offered_pairs() == ["tiny-llama", "qwen3-4b-dflash", "qwen3-8b-dflash"]
    monkeypatch.setenv("LIBRASPEC_PAIRS", "tiny-llama,llama-70b")
    with pytest.raises(ValueError, match="unknown model pair 'llama-70b'"):
        registry.offered_pairs()


@pytest.mark.app  # imports ui/
def test_session_switches_between_offered_pairs(monkeypatch, tmp_path):
    from libraspec.spec import RunSpec
    from ui.session import Session

    monkeypatch.setenv("LIBRASPEC_CACHE", str(tmp_path))
    session = Session(offered=["tiny-llama", "tiny-qwen3"])
    assert session.model == "tiny-llama" and not session.loaded
    texts = {}
    for name in ("tiny-qwen3", "tiny-llama", "tiny-qwen3"):
        session.select(name)
        final = list(session.races.stream("Hi!", RunSpec(max_new_tokens=6)))[-1]
        assert session.pair.name == name and final.run.finished
        texts.setdefault(name, final.run.text("static"))
        assert final.run.text("static") == texts[name]  # the same pair gives the same greedy text again
    with pytest.raises(ValueError, match="'smollm2-135m' is not offered here; choose one of tiny-llama, tiny-qwen3"):
        session.select("smollm2-135m")
    assert session.pair.name == "tiny-qwen3"  # a refused choice changes nothing
    old_weights = weakref.ref(session.pair.target.model)
    session.select("tiny-llama")
    gc.collect()
    assert old_weights() is None  # stored runs keep no reference to a switched-out pair's weights
    assert len(session.races.runs()) == 3 and session.races.runs()[-1].text("static") == texts["tiny-qwen3"]


@pytest.mark.app  # imports ui/
def test_dropdown_only_when_more_than_one_pair_is_offered():
    pytest.importorskip("gradio")
    import app
    from ui.session import Session

    def dropdowns(offered):
        demo = app.build_demo(Session(offered=offered))
        return [c for c in demo.config["components"] if c.get("props", {}).get("elem_id") == "ls-model"]

    assert dropdowns(["tiny-llama"]) == []
    (menu,) = dropdowns(["tiny-llama", "qwen3-8b-dflash"])
    assert menu["props"]["value"] == "tiny-llama"
    assert [choice[1] for choice in menu["props"]["choices"]] == ["tiny-llama", "qwen3-8b-dflash"]
