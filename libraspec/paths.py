"""Where the project's files live, and reading prompt files: the one place paths are built.

ROOT is the repository (the folder holding libraspec/ and assets/); PUBLIC_DATA is the shared
folder of public evaluation prompts beside it, read at run time and never committed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "assets"
PROMPTS_DIR = ASSETS / "prompts"  # the app's and the report's own prompt suites
EXAMPLES_PATH = ASSETS / "examples.json"  # the app's example prompts: [{"category", "prompt"}, ...]
PUBLIC_DATA = ROOT.parent / "shared" / "data"
PROMPT_KEYS = ("prompt", "question", "problem", "turns")  # HumanEval, GSM8K, MATH-500, MT-Bench
CACHE_ENV = "LIBRASPEC_CACHE"  # overrides the user cache folder
# public prompt sets, read at run time from the shared data folder beside the repository and never
# committed; the report's --suites and the drafter evaluation choose them by name
PUBLIC_SUITES = {
    "gsm8k": "gsm8k_test.jsonl",
    "humaneval": "humaneval.jsonl",
    "math500": "math500.jsonl",
    "mtbench": "mt_bench_questions.jsonl",
}


def cache_root() -> Path:
    """The user cache folder for converted models, latency profiles and stored races:
    `$LIBRASPEC_CACHE`, or ~/.cache/libraspec."""
    root = os.environ.get(CACHE_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "libraspec"


def read_prompts(path: str | os.PathLike) -> list[str]:
    """Prompts of a JSONL file: each non-blank line an object with `prompt`, `question`,
    `problem` or `turns` (a list whose first turn is used). Errors name the file and line."""
    prompts = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}, line {number}"
            try:
                item = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: not valid JSON ({err.msg})") from None
            if not isinstance(item, dict):
                raise ValueError(f"{where}: expected a JSON object with one of {', '.join(PROMPT_KEYS)}")
            key = next((k for k in PROMPT_KEYS if k in item), None)
            if key is None:
                raise ValueError(f"{where}: the object has none of the keys {', '.join(PROMPT_KEYS)}")
            text = item[key]
            if key == "turns":
                if not isinstance(text, list) or not text:
                    raise ValueError(f"{where}: `turns` must be a non-empty list of strings")
                text = text[0]
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{where}: `{key}` must be a non-empty string")
            prompts.append(text)
    if not prompts:
        raise ValueError(f"{path}: no prompts found")
    return prompts


def read_examples() -> list[dict]:
    """The app's example prompts, in order, each a dict with its category and prompt."""
    with open(EXAMPLES_PATH, encoding="utf-8") as handle:
        return json.load(handle)


def suite_path(suite: str, folder: Path = PROMPTS_DIR, data: Path = PUBLIC_DATA) -> Path:
    """A suite's prompt file: assets/prompts/SUITE.jsonl, or a public set (`PUBLIC_SUITES`) in `data`."""
    if suite in PUBLIC_SUITES:
        path = Path(data) / PUBLIC_SUITES[suite]
        if not path.is_file():
            raise FileNotFoundError(
                f"public prompt suite {suite!r} needs {path} (the shared data folder beside "
                "the repository; its files are read at run time, never copied in)"
            )
        return path
    path = Path(folder) / f"{suite}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"prompt suite {suite!r} not found: {path} (public suites: {', '.join(PUBLIC_SUITES)})")
    return path
