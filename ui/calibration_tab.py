"""Calibration tab: drafter reliability and this machine's latency profile (layout and wiring only).

Samples (q_i, accepted_i) come from the round records of the visitor's own races or of
their last fresh run on the example prompts, kept in the page's `gr.State`
(`libraspec.analysis.calibration`); the figures come from `libraspec.views.plots`. The fresh run
(`Sweeps.static_run`) drafts with the drafter chosen on the race tab and decodes with a
static length d = d_max, so every drafted position up to d_max is submitted and labelled.
The latency profile's linear fit t0 + c k gives the paper's c, and with the runs' mean tau
and d the alpha that section 3.4's formula alpha = T_verify / (tau c) suggests.
Draft-tree rounds add a table of their nodes' path probabilities against the accepted path, by
depth (`libraspec.analysis.tree_calibration`). What is said of the records (the summary, the
tables, the API's JSON) is `calibration_summary`'s. Paper symbols: q_i, d, d_max, tau, c, alpha.
"""

from __future__ import annotations

import time

import gradio as gr

from libraspec.paths import read_examples
from libraspec.records import RoundRecord
from libraspec.spec import RunSpec
from libraspec.views import plots

from .calibration_summary import calibration_json, summarize_calibration, tree_calibration
from .common import QUEUE, as_error, client_key
from .hosting import RACE_MAX_S, gpu
from .session import Session
from .settings import D_MAX_CAP, MAX_NEW_TOKENS_CAP

SOURCES = ("your races", "fresh run on the example prompts")
UPDATE_INTERVAL_S = 0.5


class CalibrationTab:
    """The "Calibration" tab inside an open `gr.Blocks`."""

    def __init__(self, session: Session, drafter: gr.Dropdown | None = None):
        """`drafter`: the race tab's drafter choice, which the fresh run drafts with (None: the pair's default)."""
        self.session = session
        self.drafter = drafter

    def build(self) -> None:
        with gr.Tab("Calibration", id="calibration"):
            gr.Markdown(
                "How well does the drafter's confidence q_i predict that the target accepts draft i? "
                "Each submitted draft i <= d of a round is one sample, accepted iff i <= a (the "
                "accepted prefix). The oracle mode is left out: it picks d knowing the outcome."
            )
            with gr.Row():
                self.source = gr.Radio(list(SOURCES), value=SOURCES[0], label="records from")
                self.tested_only = gr.Checkbox(
                    False,
                    label="only drafts the target judged (i <= a + 1): the conditional acceptance q_i stands in for",
                )
                self.max_new_tokens = gr.Slider(
                    8,
                    MAX_NEW_TOKENS_CAP,
                    value=48,
                    step=8,
                    elem_id="ls-calib-max-new",
                    label="fresh run: max new tokens per prompt",
                )
                self.d_max = gr.Slider(1, D_MAX_CAP, value=RunSpec.d_max, step=1, label="fresh run: static d = d_max")
            with gr.Row():
                self.show_button = gr.Button("Show", variant="primary", elem_id="ls-calib-show")
                self.fresh_button = gr.Button(
                    "Fresh run on the example prompts (with the drafter chosen on the Race tab)",
                    elem_id="ls-calib-fresh",
                )
            self.summary = gr.Markdown(elem_id="ls-calib-summary")
            self.plot = gr.Plot(
                label="reliability and acceptance by position", show_label=False, elem_id="ls-calib-plot"
            )
            self.tree_text = gr.Markdown(elem_id="ls-calib-tree")
            self.tree_table = gr.Dataframe(  # shown once there are tree rounds to tabulate
                None, label="draft-tree nodes by depth", interactive=False, elem_id="ls-calib-tree-table", visible=False
            )
            self.profile_plot = gr.Plot(label="latency profile with its linear fit t0 + c k", show_label=False)
            self.fresh = gr.State({})  # this page's last fresh run: {"header": what ran, "records": its records}
            self._wire()  # inside the tab: gr.api adds a block that would split the tab bar

    def _wire(self) -> None:
        views = [self.source, self.tested_only, self.fresh]
        outputs = [self.summary, self.plot, self.profile_plot, self.tree_text, self.tree_table]
        self.show_button.click(self.show, views, outputs, api_visibility="private")
        # input: the visitor's choices only (a fresh run sets the source itself, with its own view)
        self.source.input(self.show, views, outputs, api_visibility="private")
        self.tested_only.input(self.show, views, outputs, api_visibility="private")
        fresh_run = gpu(lambda *args, **named: RACE_MAX_S)(self.fresh_run)  # spaces.GPU on a Space
        fresh_inputs = [self.max_new_tokens, self.d_max, self.tested_only] + ([self.drafter] if self.drafter else [])
        self.fresh_button.click(
            fresh_run, fresh_inputs, [self.source, *outputs, self.fresh], api_visibility="private", **QUEUE
        )
        gr.api(self.calibration, api_name="calibration")

    def _races(self, owner: str) -> list[RoundRecord]:
        return [r for run in self.session.races.runs(owner) for mode in run.records for r in run.records[mode]]

    def _view(self, records: list[RoundRecord], tested_only: bool):
        profile = self.session.profile()
        summary, figure = summarize_calibration(records, bool(tested_only), profile)
        tree_text, tree_table = tree_calibration(records)
        table = gr.update(value=tree_table, visible=tree_table is not None)  # no empty table before tree rounds
        return summary, figure, plots.profile_figure(profile) if profile is not None else None, tree_text, table

    def show(self, request: gr.Request, source: str, tested_only: bool, fresh: dict):
        """The view of this client's races, or of its last fresh run (`fresh`: the page's state)."""
        if source != SOURCES[1]:
            return self._view(self._races(client_key(request)), tested_only)
        fresh = fresh or {}
        summary, *figures = self._view(list(fresh.get("records", [])), tested_only)
        return (f"{fresh['header']}\n\n{summary}" if fresh.get("header") else summary), *figures

    def fresh_run(self, max_new_tokens, d_max, tested_only, drafter=None):
        """Decode every example prompt with static d = d_max, drafting with `drafter` (the race tab's
        choice); stream progress, then show the run and keep its records in the page's state (the
        last output)."""
        try:
            records, shown, line = [], 0.0, ""
            prompts = [e["prompt"] for e in read_examples()]
            for line, records in self.session.sweeps.static_run(prompts, d_max, max_new_tokens, drafter):
                if records is None or time.monotonic() - shown >= UPDATE_INTERVAL_S:
                    shown = time.monotonic()
                    yield gr.skip(), line, gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
        except ValueError as error:
            raise as_error(error) from error
        summary, *figures = self._view(records, tested_only)
        yield SOURCES[1], f"{line}\n\n{summary}", *figures, {"header": line, "records": records}

    def calibration(self, request: gr.Request, tested_only: bool = False) -> dict:
        """Calibration of the drafter over this client's races: ECE, reliability bins, acceptance by
        position, and for draft-tree nodes their path probability against the accepted path by depth."""
        return calibration_json(self._races(client_key(request)), bool(tested_only))
