"""What the LibraSpec paper reports, once, as data: each number with where it stands in the paper.

The report's "Compared with the paper" rows (report_md.py) read these; no other module types a
paper figure. `Reported.span` writes a number or a range the way the report shows it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reported:
    """One reported figure: a number (low == high) or a range, its unit, its place in the paper, and
    the decimals the paper writes it with."""

    low: float
    high: float
    unit: str  # "x": a speedup or a gain in speedup; "tokens"; "": a setting
    where: str  # the table, figure or section it comes from
    digits: int = 2

    def span(self) -> str:
        """ "8.49x", "0.39-0.69x", "2.78 tokens", "2.0-2.2": as the paper writes it."""
        low, high = f"{self.low:.{self.digits}f}", f"{self.high:.{self.digits}f}"
        return (low if low == high else f"{low}-{high}") + {"x": "x", "tokens": " tokens", "": ""}[self.unit]


REPORTED = {
    # the largest speedup over AR of any model and drafter (GPUs)
    "speedup": Reported(8.49, 8.49, "x", "abstract"),
    # what LibraSpec adds to a diffusion drafter's speedup over the drafter's own lengths
    "gain": Reported(0.5, 1.5, "x", "abstract", digits=1),
    # what LibraSpec adds to DDTree's speedup, greedy and sampling
    "gain_ddtree_greedy": Reported(0.39, 0.69, "x", "section 4.3, Table 2"),
    "gain_ddtree_sampling": Reported(0.45, 0.56, "x", "section 4.3, Table 2"),
    # mean |d - d*| against the oracle's schedule on four case-study texts
    "mad_libraspec": Reported(2.78, 2.78, "tokens", "section 4.7"),
    "mad_static": Reported(9.48, 9.48, "tokens", "section 4.7"),
    # the best alpha: 2.0 (Qwen2.5-7B with Fast-dLLM) to 2.2 (Qwen3-8B with DFlash)
    "alpha": Reported(2.0, 2.2, "", "section 4.5, Table 4", digits=1),
    # the d_max of every DFlash and DDTree run (beyond about 22-24 drafts DFlash's q drifts from p)
    "d_max_dflash": Reported(24, 24, "", "section 4.6, Figure 4", digits=0),
}
