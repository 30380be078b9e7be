"""Sweep tab: LibraSpec over an alpha x d_max grid on a prompt set (layout and wiring only).

`Sweeps.sweep` runs `libraspec.experiments.sweep.iter_sweep` (AR once per prompt, the grid replayed from
draft traces with the oracle annotation, the best cells decoded for real, alpha "auto" =
`AutoAlphaLibraSpecPolicy`; greedy, the other chain rules replayed at each d_max from the same
drafts); this tab streams its progress, draws `tuning_plots.sweep_figure` over the cells, shows the
rules' rows in a small table below it (`sweeps.split_rules`) and offers every row as CSV. A Cancel button
stops the sweep of the same page (`Sweeps.cancel_sweep`, keyed by the page's gradio session)
before its next run. Paper symbols: alpha, d_max, d*, tau.
"""

from __future__ import annotations

import os
import time

import gradio as gr
import pandas as pd

from libraspec.drafters import DRAFTER_TITLES, DRAFTERS
from libraspec.experiments.sweep import (
    COLUMNS,
    DEFAULT_ALPHAS,
    DEFAULT_D_MAXES,
    MAX_NEW_TOKENS,
    alpha_label,
    parse_alphas,
    parse_d_maxes,
)
from libraspec.views import tuning_plots

from .common import QUEUE, as_error, client_key
from .hosting import RACE_MAX_S, gpu
from .render import status_html
from .session import Session
from .settings import MAX_NEW_TOKENS_CAP
from .sweeps import EXAMPLES, MAX_PROMPTS, RULE_COLUMNS, load_prompt_set, prompt_count, prompt_sets, split_rules

FIGURE_INTERVAL_S = 1.0


def race_drafter(session: Session, owner: str) -> str | None:
    """The drafter of `owner`'s latest race, else the loaded pair's default drafter (None before load)."""
    runs = session.races.runs(owner)
    return runs[-1].drafter if runs and runs[-1].drafter in DRAFTERS else session.default_drafter


class SweepTab:
    """The "Sweep" tab inside an open `gr.Blocks`; one sweep at a time (the model queue)."""

    def __init__(self, session: Session):
        self.session = session
        # spaces.GPU on a Space (one reservation per sweep); the client's key, not its request, crosses into it
        on_gpu = gpu(lambda *args, **named: RACE_MAX_S)
        self._sweep_live_gpu = on_gpu(self._sweep_live)
        self._sweep_gpu = on_gpu(self._sweep)

    def build(self) -> None:
        with gr.Tab("Sweep", id="sweep") as self.tab:
            gr.Markdown(
                "LibraSpec over a grid of alpha x d_max values (alpha = auto sets "
                "alpha = T_verify / (tau c) online from the latency profile and the running tau, "
                "section 3.4). AR decodes each prompt once; what the drafter proposes from every "
                "position of that text is recorded once, and every cell is **replayed** from it in "
                "seconds (*modeled*: priced by this machine's latency profile, with the oracle's d* per "
                "round). The best cells by modeled speedup are then **decoded for real** as a check "
                "(*measured*: timed here; the table's `check` column says which cells were and whether "
                "their decisions equal the replay's). Cells with identical decisions are one tie. "
                "The other chain rules (LibraSpec priced, G4, FailFast, the serving engines' rules) are "
                "replayed from the same drafts at each d_max, modeled only, in the table below the heat maps."
            )
            with gr.Row():
                self.alphas = gr.Textbox(
                    ", ".join(map(str, DEFAULT_ALPHAS)), label="alpha values (or auto)", elem_id="ls-sweep-alphas"
                )
                self.d_maxes = gr.Textbox(
                    ", ".join(map(str, DEFAULT_D_MAXES)), label="d_max values", elem_id="ls-sweep-dmax"
                )
                self.prompt_set = gr.Dropdown(prompt_sets(), value=EXAMPLES, label="prompt set")
                self.count = gr.Slider(1, MAX_PROMPTS, value=3, step=1, label="prompts", elem_id="ls-sweep-count")
                self.max_new_tokens = gr.Slider(
                    8,
                    MAX_NEW_TOKENS_CAP,
                    value=MAX_NEW_TOKENS,
                    step=8,
                    label="max new tokens",
                    elem_id="ls-sweep-max-new",
                )
                self.drafter = gr.Dropdown(
                    [(DRAFTER_TITLES[d], d) for d in DRAFTERS],
                    value=self.session.default_drafter or DRAFTERS[0],
                    label="drafter",
                    elem_id="ls-sweep-drafter",
                )
            with gr.Row():
                self.run_button = gr.Button("Run sweep", variant="primary", elem_id="ls-sweep-run")
                self.cancel_button = gr.Button("Cancel", variant="stop", elem_id="ls-sweep-cancel")
            self.status = gr.HTML(status_html("Set the grid and press Run sweep."), elem_id="ls-sweep-status")
            self.cancel_note = gr.HTML("", elem_id="ls-sweep-cancel-note")  # what Cancel did
            empty = tuning_plots.sweep_figure(
                pd.DataFrame(columns=COLUMNS), [alpha_label(a) for a in DEFAULT_ALPHAS], list(DEFAULT_D_MAXES)
            )
            self.plot = gr.Plot(empty, label="sweep heatmaps", show_label=False, elem_id="ls-sweep-plot")
            self.rules = gr.Dataframe(
                pd.DataFrame(columns=RULE_COLUMNS),
                label="other rules at each d_max, modeled, same drafts",
                interactive=False,
                elem_id="ls-sweep-rules",
            )
            self.table = gr.Dataframe(pd.DataFrame(columns=COLUMNS), label="one row per cell", interactive=False)
            self.csv = gr.File(label="sweep CSV", interactive=False)
            self._wire()  # inside the tab: gr.api adds a block that would split the tab bar

    def _wire(self) -> None:
        inputs = [self.alphas, self.d_maxes, self.prompt_set, self.count, self.max_new_tokens, self.drafter]
        self.run_button.click(
            self.sweep_live,
            inputs,
            [self.status, self.plot, self.rules, self.table, self.csv],
            api_visibility="private",
            show_progress="minimal",
            **QUEUE,
        )
        self.run_button.click(lambda: "", None, [self.cancel_note], queue=False, api_visibility="private")
        self.cancel_button.click(self.cancel, None, [self.cancel_note], queue=False, api_visibility="private")
        self.tab.select(self.follow_race, None, [self.drafter], queue=False, api_visibility="private")
        gr.api(self.sweep, api_name="sweep", **QUEUE)

    def follow_race(self, request: gr.Request):
        """Opening the tab: the drafter of this visitor's latest race, else the pair's default (the
        race tab switches to it once the model is ready), so a sweep drafts as the races do."""
        drafter = race_drafter(self.session, client_key(request))
        return gr.update(value=drafter) if drafter else gr.skip()

    def cancel(self, request: gr.Request) -> str:
        """Stop this page's sweep before its next run; other visitors' sweeps go on. The reply goes
        to a line of its own: on the status line it could land after the sweep's own "Cancelled"
        and hide it."""
        if not self.session.sweeps.cancel_sweep(client_key(request)):
            return status_html("No sweep of yours is running.")
        return status_html("Cancelling after the current run…")

    def _events(self, owner: str, alphas: str, d_maxes: str, prompt_set: str, count, max_new_tokens, drafter=None):
        """(message, SweepEvent or None) while the sweep runs; bad input raises ValueError."""
        count, corrected = prompt_count(count)
        prompts = load_prompt_set(prompt_set, count)
        for message, event in self.session.sweeps.sweep(prompts, alphas, d_maxes, max_new_tokens, owner, drafter):
            yield message + corrected, event

    def sweep_live(self, request: gr.Request, alphas, d_maxes, prompt_set, count, max_new_tokens, drafter=None):
        """Stream progress and heatmaps; the table and CSV once the sweep ends or is cancelled."""
        yield from self._sweep_live_gpu(
            client_key(request), alphas, d_maxes, prompt_set, count, max_new_tokens, drafter
        )

    def _sweep_live(self, owner, alphas, d_maxes, prompt_set, count, max_new_tokens, drafter=None):
        axes = None
        shown = 0.0
        try:
            for message, event in self._events(owner, alphas, d_maxes, prompt_set, count, max_new_tokens, drafter):
                if event is None:
                    yield status_html(message), gr.skip(), gr.skip(), gr.skip(), gr.skip()
                    continue
                axes = axes or ([alpha_label(a) for a in parse_alphas(alphas)], list(parse_d_maxes(d_maxes)))
                last = event.cancelled or event.finished
                if last or time.monotonic() - shown >= FIGURE_INTERVAL_S:
                    shown = time.monotonic()
                    figure = tuning_plots.sweep_figure(event.frame, *axes)
                    cells, rules = split_rules(event.frame)
                    yield (
                        status_html(message),
                        figure,
                        rules.round(4),
                        cells.round(4),
                        self._csv(event.frame) if last else gr.skip(),
                    )
                else:
                    yield status_html(message), gr.skip(), gr.skip(), gr.skip(), gr.skip()
        except (ValueError, OSError) as error:
            raise as_error(error) from error

    def _csv(self, frame: pd.DataFrame) -> str:
        path = os.path.join(self.session.downloads.folder(), "libraspec-sweep.csv")
        frame.to_csv(path, index=False)
        return path

    def sweep(
        self,
        request: gr.Request,
        alphas: str = ", ".join(map(str, DEFAULT_ALPHAS)),
        d_maxes: str = ", ".join(map(str, DEFAULT_D_MAXES)),
        prompt_set: str = EXAMPLES,
        count: int = 3,
        max_new_tokens: int = MAX_NEW_TOKENS,
        drafter: str = "",
    ) -> list[dict]:
        """Run a sweep and return one row per (alpha, d_max) cell: tau, mean d, alpha used,
        measured and modeled speedup over AR, mean |d - d*|, and the drafter it drafted with
        (drafter "" = the pair's default; dflash, fastdllm, lookup or hybrid); then one row per other chain
        rule x d_max (`mode` names it, alpha None), replayed from the same drafts, modeled only."""
        return self._sweep_gpu(client_key(request), alphas, d_maxes, prompt_set, count, max_new_tokens, drafter)

    def _sweep(self, owner, alphas, d_maxes, prompt_set, count, max_new_tokens, drafter="") -> list[dict]:
        event = None
        try:
            for _, ev in self._events(owner, alphas, d_maxes, prompt_set, count, max_new_tokens, drafter):
                event = ev or event
        except (ValueError, OSError) as error:
            raise as_error(error) from error
        frame = event.frame if event is not None else pd.DataFrame(columns=COLUMNS)
        return frame.astype(object).where(frame.notna(), None).to_dict(orient="records")
