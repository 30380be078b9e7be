"""One-shot GPU check: correctness on CUDA and latency profiles of the real pairs' shapes.

    python3 scripts/gpu_check.py OUT            # on the GPU machine, as it is (nothing downloaded)
    python3 scripts/gpu_check.py OUT --dry-run  # tiny shapes on the CPU: the same code path in seconds

Needs only the repository: torch, transformers, numpy, safetensors and pytest (what the device
machine has; no gradio, no hub). Prints its plan and an estimate first; writes OUT/report.json
after every step (a failed step is recorded with its error and the next one runs) and the
profiles to OUT/profiles/. Steps:

1. tests: the CUDA-marked tests (greedy == AR for every mode and drafter, trees included, in fp32
   and bf16, counting bf16's rounding ties), then the engine, tree (SDPA and eager tree masks,
   caches equal a rebuild after every round) and exact-sampling tests with LIBRASPEC_DEVICE=cuda;
2. profiles: Qwen3-4B- and Qwen3-8B-shaped targets with DFlash-b16-shaped drafters (random
   weights, bf16, SDPA, `models.shapes`) at contexts 256 and 2048: verification of 1..64 tokens
   (k = 1 is the AR step), tree verification of 16..512 nodes, one and two drafter passes, the
   drafter's context upkeep, and verification at concurrency B = 1..32 (B sequences of d + 1
   tokens, d = 1..16, in meta["concurrency"]); one `LatencyProfile` file per shape and context;
3. decode: a 4B-shaped pair written as a z-lab-format folder on the device and loaded through
   `registry.hub_pair` (the Space's code path), a few rounds in every mode, timed, against AR.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from libraspec.models.shapes import SHAPES, random_pair, write_zlab_folders  # noqa: E402

PLAN = {  # what each run measures; the dry run keeps the structure on tiny numbers
    "gpu": dict(
        shapes=("qwen3-4b", "qwen3-8b"),
        contexts=(256, 2048),
        max_tokens=65,
        tree_rows=(17, 33, 65, 129, 257, 513),
        batches=(1, 2, 4, 8, 16, 32),
        batch_tokens=17,
        repeats=5,
        decode_shape="qwen3-4b",
        decode_tokens=32,
        test_timeouts=(150, 240),  # the CUDA-marked tests, the engine / tree / exact-sampling tests
        tests_guess_s=240,
    ),
    "dry": dict(
        shapes=("tiny",),
        contexts=(32, 64),
        max_tokens=9,
        tree_rows=(5, 9, 17),
        batches=(1, 2),
        batch_tokens=3,
        repeats=1,
        decode_shape="tiny",
        decode_tokens=8,
        test_timeouts=(120, 120),
        tests_guess_s=10,
    ),
}
GUESS_S = {"qwen3-4b": 0.012, "qwen3-8b": 0.02, "tiny": 0.002}  # a guessed bf16 forward, for the estimate only


def estimate(plan: dict) -> float:
    """Seconds the plan should take, from counts of timed forwards and a guessed forward time."""
    seconds = plan["tests_guess_s"]
    for shape in plan["shapes"]:
        per_context = (plan["max_tokens"] + len(plan["tree_rows"]) * 2 + 4) * (plan["repeats"] + 1) + len(
            plan["batches"]
        ) * plan["batch_tokens"] * (plan["repeats"] + 1) * 2
        seconds += 20 + len(plan["contexts"]) * per_context * GUESS_S[shape]  # 20 s: random weights
    return seconds + 60 + 8 * plan["decode_tokens"] * 2 * GUESS_S[plan["decode_shape"]]


def provenance(dtype) -> dict:
    import transformers

    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "dtype": str(dtype).removeprefix("torch."),
        "attention": "sdpa",
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
        try:
            query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            info["driver"] = subprocess.run(query, capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError) as error:
            info["driver"] = f"unknown ({type(error).__name__})"
    return info


class Report:
    """OUT/report.json, rewritten after every step so a failure or a kill leaves what was done."""

    def __init__(self, out: Path, data: dict):
        self.out, self.data = out, data

    def step(self, name: str, fn) -> None:
        started = time.perf_counter()
        print(f"== {name}", flush=True)
        try:
            self.data["steps"][name] = {"ok": True, **fn()}
        except Exception as error:  # recorded and reported, then the next step runs
            self.data["steps"][name] = {
                "ok": False,
                "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc()[-3000:],
            }
            print(f"   failed: {type(error).__name__}: {error}", flush=True)
        self.data["steps"][name]["seconds"] = round(time.perf_counter() - started, 1)
        self.save()

    def save(self) -> None:
        (self.out / "report.json").write_text(json.dumps(self.data, indent=1) + "\n")


def run_tests(out: Path, name: str, args: list[str], env: dict, timeout: int) -> dict:
    """One pytest run (a subprocess with its own time limit): its summary, counts and the lines the
    tests print for the report (CUDA-GREEDY)."""
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *args]
    log = out / f"{name}.log"
    with open(log, "w") as handle:  # straight to the file: a run killed at its limit leaves what it printed
        try:
            code = subprocess.run(
                command, cwd=ROOT, env={**os.environ, **env}, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    output = log.read_text(errors="replace")
    lines = [line for line in output.splitlines() if line.strip()]
    greedy = [json.loads(line.split("CUDA-GREEDY ", 1)[1]) for line in lines if "CUDA-GREEDY " in line]
    return {
        "exit_code": code,
        "summary": lines[-1] if lines else "",
        "greedy_on_cuda": greedy,
        "command": " ".join(command[1:]),
    }


def measure(shape_name: str, plan: dict, device: str, dtype, out: Path) -> dict:
    from libraspec.profiling import measure_concurrency, measure_profile

    started = time.perf_counter()
    pair = random_pair(SHAPES[shape_name], device, dtype)
    built_s = time.perf_counter() - started
    files = {}
    for context in plan["contexts"]:
        profile = measure_profile(
            pair,
            max_tokens=plan["max_tokens"],
            max_blocks=2,
            context_len=context,
            repeats=plan["repeats"],
            tree_rows=plan["tree_rows"],
        )
        concurrency = measure_concurrency(pair.target, plan["batches"], plan["batch_tokens"], context, plan["repeats"])
        profile.meta.update(
            shape=shape_name,
            weights="random (timing of the shapes, not of a trained pair's acceptance)",
            concurrency={
                "tokens": list(range(1, plan["batch_tokens"] + 1)),
                "seconds": {str(b): t for b, t in concurrency.items()},
            },
            **provenance(dtype),
        )
        gpu = (
            "h200" if "H200" in profile.meta.get("gpu", "") else (profile.meta.get("gpu") or "cpu").split()[-1].lower()
        )
        path = out / "profiles" / f"{gpu}-{shape_name}-c{context}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        profile.to_json(str(path))
        ar, k = profile.verify_s[0], min(17, len(profile.verify_s))
        v16 = profile.verify_s[k - 1]
        files[str(context)] = {
            "file": str(path.relative_to(out)),
            "ar_s": ar,
            f"verify_{k}_over_ar": v16 / ar,
            f"verify_{len(profile.verify_s)}_over_ar": profile.verify_s[-1] / ar,
            "draft_pass_s": profile.draft_s[0],
            "fit_s": profile.fit_s,
            "tree_rows": list(profile.tree_rows),
            "tree_over_ar": [t / ar for t in profile.tree_verify_s],
            "concurrency_over_batch1_ar": {
                str(b): [t / concurrency[1][0] for t in ts] for b, ts in concurrency.items()
            },
        }
        print(
            f"   {shape_name} context {context}: AR {1e3 * ar:.2f} ms, verify {k} tokens {v16 / ar:.2f} AR, "
            f"{len(profile.verify_s)} tokens {profile.verify_s[-1] / ar:.2f} AR, drafter pass "
            f"{1e3 * profile.draft_s[0]:.2f} ms",
            flush=True,
        )
    del pair
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"build_s": round(built_s, 1), "contexts": files}


def decode(plan: dict, device: str, dtype) -> dict:
    """The hub code path on a z-lab-format folder of random weights: every mode against AR."""
    from libraspec.cost import LatencyProfile
    from libraspec.engine import DecodeConfig, SpeculativeDecoder
    from libraspec.models.registry import HUB_PAIRS, hub_pair
    from libraspec.modes import MODES
    from libraspec.spec import RunSpec

    shape = SHAPES[plan["decode_shape"]]
    with tempfile.TemporaryDirectory() as root:
        started = time.perf_counter()
        target_dir, drafter_dir = write_zlab_folders(shape, Path(root), device=device, dtype=dtype)
        written_s = time.perf_counter() - started
        spec = HUB_PAIRS["qwen3-4b-dflash"]
        folders = {spec.target_repo: target_dir, spec.drafter_repo: drafter_dir}
        started = time.perf_counter()
        pair = hub_pair(spec, resolver=folders.__getitem__, device=device, dtype=dtype)
        loaded_s = time.perf_counter() - started
    profile = LatencyProfile.from_linear(0.01, 0.0002, 0.002, pair.n, 128)  # modeled times are not the point here
    decoder = SpeculativeDecoder(pair, profile)
    prompt = pair.encode_prompt("Write one sentence about the sea.")
    config = DecodeConfig.of(RunSpec(max_new_tokens=plan["decode_tokens"], d_max=pair.n))
    settings, _ = RunSpec(d_max=2 * pair.n).checked(pair.n)
    runs = {}
    for mode in MODES:
        started = time.perf_counter()
        records = list(decoder.run(prompt, mode, MODES[mode].policy(settings, decoder.profile), config))
        tokens = [t for r in records for t in r.committed_tokens]
        runs[mode] = {
            "tokens": len(tokens),
            "rounds": len(records),
            "wall_s": round(time.perf_counter() - started, 3),
            "measured_s": records[-1].cumulative_s,
            "ids": tokens,
        }
    for mode, run in runs.items():
        run["equals_ar"] = run["ids"] == runs["ar"]["ids"]
    return {
        "write_s": round(written_s, 1),
        "load_s": round(loaded_s, 1),
        "device": str(pair.target.device),
        "dtype": str(pair.target.dtype),
        "attention": pair.target.model.config._attn_implementation,
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description="One-shot GPU check (docstring of scripts/gpu_check.py).")
    parser.add_argument("out", help="folder for report.json, the test logs and profiles/")
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU, the same steps")
    parser.add_argument("--skip-tests", action="store_true", help="profiles and the decode only")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = PLAN["dry" if args.dry_run else "gpu"]
    device = "cuda" if torch.cuda.is_available() and not args.dry_run else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    print(f"plan ({'dry run' if args.dry_run else 'GPU'}, {device}, {dtype}): " + json.dumps(plan))
    print(f"estimate: about {estimate(plan) / 60:.1f} minutes", flush=True)
    if device == "cpu" and not args.dry_run:
        print("no CUDA GPU: the GPU plan needs one (use --dry-run on a CPU)")
        return 2
    report = Report(
        out,
        {
            "plan": plan,
            "dry_run": args.dry_run,
            "estimate_s": round(estimate(plan)),
            "provenance": provenance(dtype),
            "steps": {},
        },
    )
    report.save()
    if not args.skip_tests:
        env = {"LIBRASPEC_DEVICE": device, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
        files = ["tests/test_engine.py", "tests/test_tree.py", "tests/test_exact_sampling.py"]
        cuda = ["-m", "cuda", "tests/test_cuda.py"] if device == "cuda" else ["--co", "tests/test_cuda.py"]
        on_device = files if device == "cuda" else ["--co", *files]  # the dry run only collects them
        limits = plan["test_timeouts"]
        report.step("cuda_tests", lambda: run_tests(out, "cuda_tests", cuda, env, limits[0]))
        report.step("device_tests", lambda: run_tests(out, "device_tests", on_device, env, limits[1]))
    for shape in plan["shapes"]:
        report.step(f"profile_{shape}", lambda shape=shape: measure(shape, plan, device, dtype, out))
    report.step("decode", lambda: decode(plan, device, dtype))
    report.data["total_s"] = round(sum(s.get("seconds", 0) for s in report.data["steps"].values()), 1)
    report.save()
    failed = [
        name for name, step in report.data["steps"].items() if not step["ok"] or step.get("exit_code", 0) not in (0, 5)
    ]
    print(f"report: {out / 'report.json'} ({report.data['total_s']} s); failed steps: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
