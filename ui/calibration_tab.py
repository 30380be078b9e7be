"""Calibration tab: drafter reliability and this machine's latency profile (layout and wiring only).

Samples (q_i, accepted_i) come from the round records of the visitor's own races or of
their last fresh run on the example prompts, kept in the page's `gr.State`
(`libraspec.analysis.calibration`); the figures come from `libraspec.views.plots`. The fresh run
(`Session.static_run`) decodes with a static length d = d_max, so every drafted position
up to d_max is submitted and labelled. The latency profile's linear fit t0 + c k gives the
paper's c, and with the runs' mean tau and d the alpha that section 3.4's formula
alpha = T_verify / (tau c) suggests. Paper symbols: q_i, d, d_max, tau, c, alpha.
"""
from __future__ import annotations

import math
import time

import gradio as gr

from libraspec.views import plots, tuning_plots
from libraspec.analysis.calibration import (acceptance_by_position, acceptance_samples, expected_calibration_error,
                                   reliability_table)
from libraspec.records import RoundRecord
from libraspec.analysis.theory import auto_alpha

from .common import QUEUE, client_key, load_examples
from .hosting import RACE_MAX_S, gpu
from .session import Session
from .settings import D_MAX_CAP, MAX_NEW_TOKENS_CAP

SOURCES = ("your races", "fresh run on the example prompts")
UPDATE_INTERVAL_S = 0.5


def summarize_calibration(records: list[RoundRecord], tested_only: bool, profile) -> tuple[str, object]:
    """(markdown summary, calibration figure) for a set of round records."""
    samples = acceptance_samples(records, tested_only=tested_only)
    table = reliability_table(samples["q"], samples["accepted"])
    ece = expected_calibration_error(samples["q"], samples["accepted"])
    figure = tuning_plots.calibration_figure(table, acceptance_by_position(samples), ece)
    if samples.empty:
        return "No submitted drafts yet: run a race, or a fresh run on the example prompts.", figure
    rounds = samples[["mode", "round_index"]].drop_duplicates().shape[0]
    lines = [f"**{len(samples)} submitted drafts** from about {rounds} rounds "
             f"({', '.join(sorted(set(samples['mode'])))}); mean q_i = {samples['q'].mean():.3f}, "
             f"acceptance = {samples['accepted'].mean():.3f}, **ECE = {ece:.3f}** "
             "(10 equal-width bins of q, weighted by count)."]
    drafted = [r for r in records if r.mode not in ("ar", "oracle") and r.chosen_length > 0]
    if profile is not None and drafted:
        t0, c = profile.linear_fit()
        tau = sum(r.tau for r in drafted) / len(drafted)
        d = max(1, round(sum(r.chosen_length for r in drafted) / len(drafted)))
        line = (f"Latency fit on this machine: T_verify(k) = {1000 * t0:.2f} + {1000 * c:.3f} k ms "
                f"(c = cost per verified position). ")
        if c > 0:
            line += (f"With these rounds' mean tau = {tau:.2f} and mean d = {d}, section 3.4 gives "
                     f"alpha = T_verify / (tau c) = {auto_alpha(profile, tau, d):.2f}.")
        else:
            line += "c is not positive, so the formula for alpha has no finite value here."
        lines.append(line)
    return "\n\n".join(lines), figure


class CalibrationTab:
    """The "Calibration" tab inside an open `gr.Blocks`."""

    def __init__(self, session: Session):
        self.session = session

    def build(self) -> None:
        with gr.Tab("Calibration", id="calibration"):
            gr.Markdown("How well does the drafter's confidence q_i predict that the target accepts draft i? "
                        "Each submitted draft i <= d of a round is one sample, accepted iff i <= a (the "
                        "accepted prefix). The oracle mode is left out: it picks d knowing the outcome.")
            with gr.Row():
                self.source = gr.Radio(list(SOURCES), value=SOURCES[0], label="records from")
                self.tested_only = gr.Checkbox(False, label="only drafts the target judged (i <= a + 1): "
                                                             "the conditional acceptance q_i stands in for")
                self.max_new_tokens = gr.Slider(8, MAX_NEW_TOKENS_CAP, value=48, step=8, elem_id="ls-calib-max-new",
                                                label="fresh run: max new tokens per prompt")
                self.d_max = gr.Slider(1, D_MAX_CAP, value=24, step=1, label="fresh run: static d = d_max")
            with gr.Row():
                self.show_button = gr.Button("Show", variant="primary", elem_id="ls-calib-show")
                self.fresh_button = gr.Button("Fresh run on the example prompts", elem_id="ls-calib-fresh")
            self.summary = gr.Markdown(elem_id="ls-calib-summary")
            self.plot = gr.Plot(label="reliability and acceptance by position", elem_id="ls-calib-plot")
            self.profile_plot = gr.Plot(label="latency profile with its linear fit t0 + c k")
            self.fresh = gr.State([])  # this page's records of its last fresh run
            self._wire()  # inside the tab: gr.api adds a block that would split the tab bar

    def _wire(self) -> None:
        views = [self.source, self.tested_only, self.fresh]
        outputs = [self.summary, self.plot, self.profile_plot]
        self.show_button.click(self.show, views, outputs, api_visibility="private")
        self.source.change(self.show, views, outputs, api_visibility="private")
        self.tested_only.change(self.show, views, outputs, api_visibility="private")
        fresh_run = gpu(lambda *args, **named: RACE_MAX_S)(self.fresh_run)  # spaces.GPU on a Space
        self.fresh_button.click(fresh_run, [self.max_new_tokens, self.d_max, self.tested_only],
                                [self.source, *outputs, self.fresh], api_visibility="private", **QUEUE)
        gr.api(self.calibration, api_name="calibration")

    def _races(self, owner: str) -> list[RoundRecord]:
        return [r for run in self.session.runs(owner) for mode in run.records for r in run.records[mode]]

    def _view(self, records: list[RoundRecord], tested_only: bool):
        profile = self.session.profile()
        summary, figure = summarize_calibration(records, bool(tested_only), profile)
        return summary, figure, plots.profile_figure(profile) if profile is not None else None

    def show(self, request: gr.Request, source: str, tested_only: bool, fresh: list[RoundRecord]):
        """The view of this client's races, or of its last fresh run (`fresh`: the page's state)."""
        records = list(fresh or []) if source == SOURCES[1] else self._races(client_key(request))
        return self._view(records, tested_only)

    def fresh_run(self, max_new_tokens, d_max, tested_only):
        """Decode every example prompt with static d = d_max; stream progress, then show the run
        and keep its records in the page's state (the last output)."""
        try:
            records, shown = [], 0.0
            prompts = [e["prompt"] for e in load_examples()]
            for line, records in self.session.static_run(prompts, d_max, max_new_tokens):
                if records is None or time.monotonic() - shown >= UPDATE_INTERVAL_S:
                    shown = time.monotonic()
                    yield gr.skip(), line, gr.skip(), gr.skip(), gr.skip()
        except ValueError as error:
            raise gr.Error(str(error)) from error
        yield SOURCES[1], *self._view(records, tested_only), records

    def calibration(self, request: gr.Request, tested_only: bool = False) -> dict:
        """Calibration of the drafter over this client's races: ECE, reliability bins, acceptance by position."""
        samples = acceptance_samples(self._races(client_key(request)), tested_only=bool(tested_only))
        ece = expected_calibration_error(samples["q"], samples["accepted"])
        return {"samples": len(samples), "ece": ece if math.isfinite(ece) else None,
                "bins": _rows(reliability_table(samples["q"], samples["accepted"])),
                "positions": _rows(acceptance_by_position(samples))}


def _rows(frame) -> list[dict]:
    """JSON-ready rows: NaN becomes None."""
    return frame.astype(object).where(frame.notna(), None).to_dict(orient="records")
