"""What the physical price list changed: the same traces and the same measurement priced by the old
context term and by today's (issue 43, item 0). Modeled replay; nothing is timed.

    python benchmarks/price_list_change.py    # after benchmarks/replay_report.py (reads its caches)

The old model timed the tables after c0 = 256 tokens and added (c - 256) x slope(k) after any context
c, the slope per k the least-squares line through c0 of the forwards timed after 1,024 and 2,048
tokens (made non-decreasing in k) and extrapolated below c0 too: there a forward of more rows came
out cheaper. `OldContextTerm` rebuilds that model from today's measurement (its medians after 256,
1,024 and 2,048 tokens, `meta["context_fit"]`), so the two columns differ by the model alone. Per
drafter, over the replay report's traces (batch 1): the modeled speedup of LibraSpec (alpha 2.2), the
best static length, the per-round oracle and the best schedule, and how many of LibraSpec's rounds
accepted nothing while the oracle's d* was above 0 (the symptom: four verified rows priced below one).
Writes benchmarks/results/price_list/.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import replay_report  # noqa: E402

from libraspec.analysis.replay import replay  # noqa: E402
from libraspec.cost import LatencyProfile  # noqa: E402
from libraspec.experiments import grids  # noqa: E402
from libraspec.models.registry import load_pair  # noqa: E402
from libraspec.profiling import cached_profile, monotone  # noqa: E402
from libraspec.spec import RunSpec  # noqa: E402

OLD_C0 = 256


@dataclasses.dataclass(frozen=True)
class OldContextTerm(LatencyProfile):
    """A profile priced by the old context term: T(k, 256) + (c - 256) x slope(k) after any c."""

    old_k: tuple[int, ...] = ()
    old_slope_s: tuple[float, ...] = ()

    def context_s(self, k: int, context: int | None) -> float:
        base = LatencyProfile.context_s(self, k, OLD_C0)  # today's forward after 256 tokens
        if context is None:
            return base
        return base + (int(context) - OLD_C0) * float(np.interp(k, self.old_k, self.old_slope_s))


def old_model(profile: LatencyProfile) -> OldContextTerm:
    fit = profile.meta["context_fit"]
    medians = {int(c): v for c, v in fit["median_ms"].items()}
    longer = [c for c in medians if c > OLD_C0]
    dc = np.array([c - OLD_C0 for c in longer], dtype=np.float64)
    raw = [
        float(np.dot(dc, [(medians[c][j] - medians[OLD_C0][j]) / 1e3 for c in longer]) / np.dot(dc, dc))
        for j in range(len(fit["k"]))
    ]
    fields = {f.name: getattr(profile, f.name) for f in dataclasses.fields(LatencyProfile)}
    return OldContextTerm(**fields, old_k=tuple(fit["k"]), old_slope_s=monotone([max(v, 1e-12) for v in raw]))


def summary(traces, profile) -> dict:
    strata = [suite for suite, _ in traces]
    just = [t for _, t in traces]
    out = {}
    configs = [c for c in grids.chain_grid(just[0].n) if c.mode in ("static", "oracle", "best schedule")]
    configs.append(grids.Config("LibraSpec alpha=2.2", "libraspec", RunSpec()))
    for config in configs:
        out[config.label] = grids.summarize(grids.replay_rows(just, config, profile), strata)
    statics = [label for label in out if label.startswith("static d=")]
    best = max(statics, key=lambda label: out[label]["speedup"])
    wasted = annotated = 0
    for trace in just:
        for r in replay(trace, "libraspec", profile, RunSpec(), lookahead=RunSpec.d_max):
            if r.chosen_length and r.oracle_length is not None:
                annotated += 1
                wasted += r.accepted == 0 and r.oracle_length > 0
    return {
        "LibraSpec alpha=2.2": out["LibraSpec alpha=2.2"]["speedup"],
        "best static": f"{best}: {out[best]['speedup']:.3f}",
        "oracle d* per round": out["oracle d* per round"]["speedup"],
        "best schedule": out[grids.BEST]["speedup"],
        "rounds that accepted nothing with d* > 0": f"{wasted} of {annotated}",
    }


def main() -> None:
    args = replay_report.arguments()
    pair = load_pair()
    profile = cached_profile(pair, max_tokens=args.lookahead + 2, max_blocks=-(-args.lookahead // pair.n))
    old = old_model(profile)
    traces = replay_report.traces_for(args, pair, replay_report.folder(args, pair))
    rows = {drafter: {"old": summary(items, old), "new": summary(items, profile)} for drafter, items in traces.items()}
    folder = ROOT / "benchmarks" / "results" / "price_list"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        "# What the physical price list changed",
        "",
        f"`python benchmarks/price_list_change.py` (module docstring): {args.limit} prompts of each suite x "
        f"{args.max_new_tokens} tokens, batch 1, modeled; the same measurement (this machine, tables after "
        f"{profile.context_len} tokens, forwards after {', '.join(map(str, profile.meta['context_fit']['contexts']))})"
        " priced by the old context term (slope through 256 tokens, extrapolated below) and by today's.",
        "",
        "| drafter | figure | old model | physical model |",
        "|---|---|---|---|",
    ]
    for drafter, both in rows.items():
        for key in both["old"]:
            old_value, new_value = both["old"][key], both["new"][key]
            show = (lambda v: f"{v:.3f}x") if isinstance(old_value, float) else str
            lines.append(f"| {drafter} | {key} | {show(old_value)} | {show(new_value)} |")
    (folder / "README.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
