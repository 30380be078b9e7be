"""Self-written training prompts: the filter, deduplication and the exclusion of every protected prompt.

The exclusion is checked against the real protected sets: the public benchmark prompts in
../shared/data (when the folder is there, as in CI), the project's suites and the held-out
prompts, and the committed Magpie prompt file must share no 8-word window with any of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from libraspec.paths import read_examples, read_prompts
from libraspec.train.magpie import NGRAM, PROTECTED_FOLDERS, Decontaminator, clean_user_turn, normalise, protected_texts
from libraspec.train.prompts import heldout_prompts

LAYER = "unit"  # tests/conftest.py

ROOT = Path(__file__).resolve().parents[1]
SHARED = PROTECTED_FOLDERS[0]
COMMITTED = ROOT / "assets" / "selfgen" / "magpie" / "prompts.jsonl"


def test_clean_user_turn_keeps_requests_and_drops_junk():
    good = "Can you explain how a rainbow forms after the rain?"
    assert clean_user_turn(good, True) == good
    assert clean_user_turn(good, False) is None  # cut off at the token limit
    for junk in (
        "Hi there",
        "Write about " + "cats " * 40,
        "Ecris un poème sur la mer, s'il te plaît, très joli",
        "1234 5678 9012 3456 7890 == 42 +++",
        "Visit https://example.com and tell me what you see",
        "<|im_start|>assistant what is the time in Oslo",
        "user: what is the capital of France today?",
        "Qu'est-ce que la photosynthèse et comment ça marche ?",
    ):
        assert clean_user_turn(junk, True) is None, junk


def test_decontaminator_refuses_shared_windows_short_texts_and_repeats():
    protected = [
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many in May.",
        "Name three colours.",
    ]
    guard = Decontaminator(protected)
    assert not guard.accept("How many clips: natalia sold clips to 48 of her friends in April? Tell me")
    assert not guard.accept("Please name three colours, quickly")  # the short text appears whole
    assert guard.accept("Natalia sold 48 clips in April; how many did she sell in all?")  # no 8-word window
    assert not guard.accept("natalia SOLD 48 clips in April -- how many did she sell in all")  # a repeat
    assert guard.accept("Name two colours of the French flag")
    assert not guard.accept("then she sold half as many")  # a short text found whole inside a protected one
    assert guard.accept("she sold half as much")
    assert normalise("It's 3 o'clock!") == ["it", "s", "3", "o", "clock"]


def test_protected_texts_cover_every_turn_of_the_public_sets():
    texts = set(protected_texts())
    assert set(heldout_prompts()) <= texts
    for suite in sorted((ROOT / "assets" / "prompts").glob("*.jsonl")):
        assert set(read_prompts(suite)) <= texts
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is not here")
    for path in sorted(SHARED.glob("*.jsonl")):
        assert set(read_prompts(path)) <= texts, path.name
    second_turns = [
        json.loads(line)["turns"][1]
        for line in open(SHARED / "mt_bench_questions.jsonl")
        if line.strip() and len(json.loads(line).get("turns", [])) > 1
    ]
    assert second_turns and set(second_turns) <= texts


@pytest.mark.skipif(not COMMITTED.exists(), reason="no Magpie prompts committed yet")
def test_committed_prompts_are_clean_and_share_nothing_with_protected_prompts():
    prompts = [json.loads(line)["prompt"] for line in open(COMMITTED, encoding="utf-8")]
    assert prompts and len({tuple(normalise(p)) for p in prompts}) == len(prompts)
    assert all(clean_user_turn(p, True) == p for p in prompts)
    guard = Decontaminator(protected_texts())
    hits = [p for p in prompts if guard.contaminated(p)]
    assert not hits, f"{len(hits)} committed prompts share a {NGRAM}-word window with a protected prompt: {hits[:3]}"


def test_the_apps_examples_are_not_prompts_the_lookup_corpus_answered():
    """The look-up corpus holds the target's greedy answers to the Magpie and training-template
    prompts, so a race on one of them quotes that answer: the examples must show ordinary prompts."""
    from libraspec.train.prompts import training_prompts

    seen = {tuple(normalise(p)) for p in training_prompts()}
    seen |= {tuple(normalise(json.loads(line)["prompt"])) for line in open(COMMITTED, encoding="utf-8")}
    examples = read_examples()
    assert examples and not [e["prompt"] for e in examples if tuple(normalise(e["prompt"])) in seen]
