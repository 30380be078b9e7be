"""What the LibraSpec paper reports, once, as data: each number with where it stands in the paper.

The report's "Compared with the paper" rows (report_md.py) read these; no other module types a
paper figure. `Reported.span` writes a number or a range the way the report shows it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reported:
    """One reported figure: a number (low == high) or a range, its unit, and its place in the paper."""

    low: float
    high: float
    unit: str  # "x": a speedup or a gain in speedup; "tokens"; "": a setting
    where: str  # the table, figure or section it comes from

    def span(self) -> str:
        """ "8.49x", "0.39-0.69x", "2.78 tokens"."""
        number = f"{self.low:g}" if self.low == self.high else f"{self.low:g}-{self.high:g}"
        return number + {"x": "x", "tokens": " tokens", "": ""}[self.unit]


REPORTED = {
    # the largest speedup over AR of any model and drafter (GPUs)
    "speedup": Reported(8.49, 8.49, "x", "abstract"),
    # what LibraSpec adds to a diffusion drafter's speedup over the drafter's own lengths
    "gain": Reported(0.5, 1.5, "x", "abstract"),
    # what LibraSpec adds to DDTree's speedup, greedy and sampling
    "gain_ddtree_greedy": Reported(0.39, 0.69, "x", "section 4.3, Table 2"),
    "gain_ddtree_sampling": Reported(0.45, 0.56, "x", "section 4.3, Table 2"),
    # mean |d - d*| against the oracle's schedule on four case-study texts
    "mad_libraspec": Reported(2.78, 2.78, "tokens", "section 4.7"),
    "mad_static": Reported(9.48, 9.48, "tokens", "section 4.7"),
    # the best alpha: 2.0 (Qwen2.5-7B with Fast-dLLM) to 2.2 (Qwen3-8B with DFlash)
    "alpha": Reported(2.0, 2.2, "", "section 4.5, Table 4"),
    # DFlash's effective range of d_max
    "d_max_dflash": Reported(22, 24, "", "section 4.6, Figure 4"),
}
