#!/usr/bin/env bash
# GPU check, offline, within 5 minutes: the CUDA-marked tests (tests/test_cuda.py: greedy
# speculative == greedy AR on CUDA in bf16 and fp32), then the latency profile of the embedded
# pair on the GPU (libraspec.profiling.measure_profile, bf16 and fp32) and a short greedy race
# (AR vs LibraSpec, 64 tokens), all written to a JSON report.
#   usage: scripts/gpu_check.sh REPORT.json
# On a machine without a CUDA GPU the tests skip with a reason, the profile step prints
# "no CUDA GPU: skipped", and the script exits 0. Nothing is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
REPORT=${1:?usage: scripts/gpu_check.sh REPORT.json}
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False

set +e
timeout 150 "$PY" -m pytest -q -rs -m cuda tests/test_cuda.py -p no:cacheprovider 2>&1 | tee /tmp/libraspec-gpu-pytest.log
TESTS_RC=${PIPESTATUS[0]}
set -e
SUMMARY=$(tail -n 1 /tmp/libraspec-gpu-pytest.log)

timeout 140 "$PY" - "$REPORT" "$TESTS_RC" "$SUMMARY" <<'EOF'
import dataclasses
import json
import sys
import time

import torch

report_path, tests_rc, summary = sys.argv[1], int(sys.argv[2]), sys.argv[3]
report = {"cuda_tests": {"exit_code": tests_rc, "summary": summary}, "torch": torch.__version__,
          "cuda_available": torch.cuda.is_available()}


def profile_and_race(dtype) -> None:
    """Embedded pair on the GPU: measured latency profile, then AR vs LibraSpec on one prompt."""
    from libraspec.engine import DecodeConfig, SpeculativeDecoder
    from libraspec.models.registry import load_pair
    from libraspec.policy import LibraSpecPolicy
    from libraspec.profiling import measure_profile

    started = time.perf_counter()
    pair = load_pair("smollm2-135m", device="cuda", dtype=dtype)
    load_s = time.perf_counter() - started
    profile = measure_profile(pair, max_tokens=25, max_blocks=2, context_len=256, repeats=7)
    name = str(dtype).removeprefix("torch.")
    report["profiles"][name] = {**dataclasses.asdict(profile), "load_s": load_s}
    decoder = SpeculativeDecoder(pair, profile)
    ids = pair.encode_prompt("Explain in three sentences why the sky is blue.")
    config = DecodeConfig(max_new_tokens=64, d_max=24)
    runs = {}
    for mode, policy in (("ar", None), ("libraspec", LibraSpecPolicy(2.2, 24))):
        records = list(decoder.run(ids, mode, policy, config))
        tokens = [t for r in records for t in r.committed_tokens]
        seconds = records[-1].cumulative_s
        runs[mode] = {"tokens": len(tokens), "rounds": len(records), "seconds": seconds,
                      "tokens_per_s": len(tokens) / seconds, "ids": tokens}
    runs["libraspec"]["equals_ar"] = runs["libraspec"]["ids"] == runs["ar"]["ids"]
    runs["libraspec"]["tau"] = runs["libraspec"]["tokens"] / runs["libraspec"]["rounds"]
    runs["speedup_measured"] = runs["libraspec"]["tokens_per_s"] / runs["ar"]["tokens_per_s"]
    report["races"][name] = runs
    print(f"{name}: AR {1000 * profile.verify_s[0]:.1f} ms/token, verify 16 tokens "
          f"{1000 * profile.verify_s[15]:.1f} ms, draft 1 block {1000 * profile.draft_s[0]:.1f} ms; "
          f"race tau {runs['libraspec']['tau']:.2f}, speedup {runs['speedup_measured']:.2f}x, "
          f"equals AR {runs['libraspec']['equals_ar']}")
    del pair, decoder
    torch.cuda.empty_cache()


if not torch.cuda.is_available():
    print("no CUDA GPU: skipped")
else:
    report.update(gpu=torch.cuda.get_device_name(0), profiles={}, races={})
    for dtype in (torch.bfloat16, torch.float32):
        try:
            profile_and_race(dtype)
        except (ImportError, OSError, RuntimeError, ValueError) as error:  # reported, not hidden
            report.setdefault("errors", {})[str(dtype)] = f"{type(error).__name__}: {error}"
            print(f"{dtype}: {type(error).__name__}: {error}", file=sys.stderr)
with open(report_path, "w") as handle:
    json.dump(report, handle, indent=1)
print(f"report: {report_path}")
EOF
exit "$TESTS_RC"
