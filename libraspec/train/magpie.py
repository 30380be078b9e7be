"""Training prompts written by the target itself (Magpie, arXiv 2406.08464), filtered and decontaminated.

Fed its chat template up to the user turn (the default system turn, then `<|im_start|>user\\n`),
an instruction model writes a plausible user request. Sampled at temperature, this gives
prompts as varied as the model's own idea of a user, and they come from the distribution the
model answers. Each candidate passes `clean_user_turn` (finished turn, 4..120 words, English
ASCII text, no degenerate repetition, no markup), is deduplicated on its normalised text, and is
dropped when it shares any `NGRAM`-word window with a protected prompt, when a protected prompt
shorter than the window appears whole inside it, or when the candidate, if shorter than the
window, appears whole inside a protected prompt. Protected: the public benchmark sets in
../shared/data (every turn), the project's suites `assets/prompts` and the held-out prompts.
`tests/test_magpie.py` proves the exclusion.

    python -m libraspec.train.magpie --out DIR --count 20000 [--batch-size 64] [--threads 1]

Appends accepted prompts to DIR/prompts.jsonl ({"prompt", "batch"}); batch b samples with seed
SEED + b, and DIR/state.json records the next batch, so a rerun resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import DynamicCache

from ..files import atomic_write_text
from ..paths import PROMPTS_DIR, PUBLIC_DATA

SEED = 1406
NGRAM = 8  # decontamination window, in normalised words
ENGLISH = frozenset(
    "the a an is are was what how why when which who of to in and or for you your i my me "
    "can could do does with on it this that be write explain give list describe make "
    "tell help please should would about from".split()
)
PROTECTED_FOLDERS = (PUBLIC_DATA, PROMPTS_DIR)  # every JSONL file in them, the held-out prompts besides
TEXT_KEYS = ("prompt", "question", "problem", "turns", "text", "instruction")


def magpie_prefix_ids(tokenizer) -> list[int]:
    """The chat template up to the start of the user's text: system turn + `<|im_start|>user\\n`."""
    marker = "\x00MAGPIE\x00"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": marker}], tokenize=False, add_generation_prompt=False
    )
    head = text[: text.index(marker)]
    if not head.endswith("user\n"):
        raise ValueError(f"unexpected chat template around the user turn: {head[-40:]!r}")
    return list(tokenizer(head, add_special_tokens=False)["input_ids"])


def normalise(text: str) -> list[str]:
    """Lower-case words of letters and digits: what deduplication and decontamination compare."""
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).split()


def clean_user_turn(text: str, finished: bool) -> str | None:
    """The candidate's text if it looks like a real English request, else None."""
    text = text.strip()
    words = text.split()
    if not finished or not 4 <= len(words) <= 120 or "<|" in text or "http" in text.lower():
        return None
    if sum(c.isascii() for c in text) < 0.98 * len(text):
        return None
    visible = [c for c in text if not c.isspace()]
    if sum(c.isalpha() for c in visible) < 0.6 * len(visible):
        return None
    norm = normalise(text)
    if len(norm) < 4 or sum(w in ENGLISH for w in norm) < 2:
        return None
    if max(norm.count(w) for w in set(norm)) > max(3, 0.3 * len(norm)):  # a loop, not a request
        return None
    if text.lower().startswith(("user", "assistant", "system", "smollm")):
        return None
    return text


def protected_texts(folders=PROTECTED_FOLDERS, extra: list[str] | None = None) -> list[str]:
    """Every prompt text that training must never see: each string field of TEXT_KEYS (every turn)
    of every JSONL file in `folders` that exist, plus the held-out prompts and `extra`."""
    from .prompts import heldout_prompts

    texts = list(heldout_prompts()) + list(extra or [])
    for folder in folders:
        for path in sorted(Path(folder).glob("*.jsonl")) if Path(folder).is_dir() else []:
            for line in open(path, encoding="utf-8"):
                if not line.strip():
                    continue
                item = json.loads(line)
                for key in TEXT_KEYS:
                    value = item.get(key) if isinstance(item, dict) else None
                    texts += [value] if isinstance(value, str) else [v for v in value or [] if isinstance(v, str)]
    return texts


class Decontaminator:
    """Refuses any text sharing an `NGRAM`-word window with a protected text, containing a protected
    text shorter than the window, or (itself shorter) contained in one; and repeats of an accepted text."""

    def __init__(self, protected: list[str], ngram: int = NGRAM):
        self.ngram = ngram
        self.windows: set[tuple[str, ...]] = set()
        self.short: set[tuple[str, ...]] = set()
        self.seen: set[tuple[str, ...]] = set()
        self.joined = "".join(f" {' '.join(normalise(text))} \n" for text in protected)  # word-bounded search
        for text in protected:
            words = normalise(text)
            if len(words) < ngram:
                self.short.add(tuple(words))
            self.windows |= self._windows(words)

    def _windows(self, words: list[str]) -> set[tuple[str, ...]]:
        return {tuple(words[i : i + self.ngram]) for i in range(len(words) - self.ngram + 1)}

    def contaminated(self, text: str) -> bool:
        words = normalise(text)
        if self._windows(words) & self.windows:
            return True
        if len(words) < self.ngram and f" {' '.join(words)} " in self.joined:
            return True
        return any(tuple(words[i : i + len(s)]) == s for s in self.short if s for i in range(len(words) - len(s) + 1))

    def accept(self, text: str) -> bool:
        """True (and remembered) for a new, clean text; False for a repeat or a contaminated one."""
        key = tuple(normalise(text))
        if key in self.seen or self.contaminated(text):
            return False
        self.seen.add(key)
        return True


@torch.inference_mode()
def sample_user_turns(
    model,
    prefix: list[int],
    batch: int,
    max_tokens: int,
    stop_ids: set[int],
    temperature: float,
    top_p: float,
    generator: torch.Generator,
) -> list[tuple[list[int], bool]]:
    """`batch` continuations of `prefix` sampled until a stop id: (token ids without the stop, finished)."""
    device = next(model.parameters()).device
    ids = torch.tensor([prefix] * batch, device=device)  # (B, L): one shared prefix, no padding
    cache = DynamicCache(config=model.config)
    logits = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]  # (B, V)
    out: list[list[int]] = [[] for _ in range(batch)]
    finished = [False] * batch
    alive = list(range(batch))
    position = len(prefix)
    for _ in range(max_tokens):
        probs = torch.softmax(logits.float() / temperature, -1)  # (b, V)
        if top_p < 1.0:
            sorted_p, order = probs.sort(-1, descending=True)
            drop = sorted_p.cumsum(-1) - sorted_p > top_p  # keep the smallest set whose mass reaches top_p
            sorted_p[drop] = 0.0
            probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
        tokens = torch.multinomial(probs.cpu(), 1, generator=generator).view(-1)  # (b,)
        keep = []
        for i, (row, tok) in enumerate(zip(alive, tokens.tolist())):
            if tok in stop_ids:
                finished[row] = True
            else:
                out[row].append(tok)
                keep.append(i)
        if not keep:
            break
        if len(keep) < len(alive):
            cache.batch_select_indices(torch.tensor(keep, device=device))
            tokens = tokens[keep]
            alive = [alive[i] for i in keep]
        logits = model(
            input_ids=tokens.view(-1, 1).to(device),
            past_key_values=cache,
            use_cache=True,
            position_ids=torch.full((len(alive), 1), position, device=device),
        ).logits[:, -1]
        position += 1
    return list(zip(out, finished))


def main(argv=None) -> None:
    from ..models.embedded import load_smollm2
    from .selfdistill import stop_and_pad_ids

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--count", type=int, default=20000, help="accepted prompts to reach")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=96, help="longest user turn sampled")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=0.98)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prompts_path, state_path = out / "prompts.jsonl", out / "state.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else {"next_batch": 0, "sampled": 0}
    guard = Decontaminator(protected_texts())
    accepted = 0
    if prompts_path.exists():
        for line in open(prompts_path, encoding="utf-8"):
            accepted += guard.accept(json.loads(line)["prompt"])
    model, tokenizer = load_smollm2()
    model.to(args.device)
    prefix = magpie_prefix_ids(tokenizer)
    stop_ids = stop_and_pad_ids(tokenizer)[0]
    bar = tqdm(total=args.count, initial=min(accepted, args.count), unit="prompt", file=sys.stderr)
    while accepted < args.count:
        b = state["next_batch"]
        generator = torch.Generator().manual_seed(SEED + b)
        rows = sample_user_turns(
            model, prefix, args.batch_size, args.max_tokens, stop_ids, args.temperature, args.top_p, generator
        )
        lines = []
        for ids, finished in rows:
            text = clean_user_turn(tokenizer.decode(ids), finished)
            if text is not None and guard.accept(text):
                lines.append(json.dumps({"prompt": text, "batch": b}) + "\n")
        with open(prompts_path, "a", encoding="utf-8") as handle:
            handle.write("".join(lines))
            handle.flush()
            os.fsync(handle.fileno())
        accepted += len(lines)
        state = {"next_batch": b + 1, "sampled": state["sampled"] + len(rows)}
        atomic_write_text(state_path, json.dumps(state))
        bar.update(min(accepted, args.count) - bar.n)
        bar.set_postfix(kept=f"{accepted / max(state['sampled'], 1):.0%}")


if __name__ == "__main__":
    main()
