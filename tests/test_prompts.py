"""Training prompts: the held-out set is fixed, disjoint from training, and indices are stable."""

import json
from pathlib import Path

import pytest

from libraspec.train.prompts import HELDOUT_SIZE, all_prompts, heldout_prompts, training_prompts, write_heldout

LAYER = "unit"  # tests/conftest.py

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def test_heldout_matches_the_shipped_list(tmp_path):
    shipped = ASSETS / "heldout_prompts.jsonl"
    assert [json.loads(line)["prompt"] for line in open(shipped, encoding="utf-8")] == heldout_prompts()
    assert len(heldout_prompts()) == HELDOUT_SIZE
    write_heldout(tmp_path / "heldout.jsonl")
    assert (tmp_path / "heldout.jsonl").read_bytes() == shipped.read_bytes(), (
        "assets/heldout_prompts.jsonl is stale: rewrite it with libraspec.train.prompts.write_heldout"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["heldout.jsonl"]  # no temporary file left behind


def test_training_never_sees_a_heldout_prompt():
    train = training_prompts()
    assert not set(train) & set(heldout_prompts())
    assert len(set(train)) == len(train)


def test_more_prompts_keep_every_earlier_index():
    assert all_prompts(5000)[:3000] == all_prompts(3000)
    assert training_prompts()[:100] == all_prompts(HELDOUT_SIZE + 100)[HELDOUT_SIZE:]


def test_bad_count_is_refused():
    with pytest.raises(ValueError, match="positive"):
        all_prompts(0)
