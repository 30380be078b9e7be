"""Algorithm step-through tab: Algorithm 1 one iteration per click (layout and wiring only).

What each step shows (the confidences, the cost model, the states and their text, E[eta_d]) is
`stepthrough`'s; a replay of a race round that differed from the round would say so there.
Paper symbols: alpha, n, d, d_max, B, eps_i, q_i, tau.
"""

from __future__ import annotations

import dataclasses

import gradio as gr

from libraspec.spec import RunSpec

from .common import as_error, client_key
from .session import Session
from .settings import ALPHA_MAX, ALPHA_MIN, D_MAX_CAP
from .stepthrough import (
    COSTS,
    SOURCES,
    Inputs,
    pasted_states,
    race_round_settings,
    refused_view,
    step_view,
    suggested_slider_alpha,
)


class TeachTab:
    """The "Algorithm step-through" tab inside an open `gr.Blocks`."""

    def __init__(self, session: Session):
        self.session = session

    def build(self) -> None:
        with gr.Tab("Algorithm step-through", id="teach"):
            gr.Markdown(
                "Walk LibraSpec's Algorithm 1 one iteration at a time: each step compares "
                "eps* = min_i eps_i with d, grows d when every bound lies above it, and stops "
                "(with the single rollback) when one falls at or below d."
            )
            defaults = Inputs()
            with gr.Row():
                with gr.Column():
                    self.source = gr.Radio(
                        list(SOURCES), value=defaults.source, label="confidences q_i from", elem_id="ls-teach-source"
                    )
                    self.start = gr.Slider(
                        0.0, 1.0, value=defaults.start, step=0.01, label="synthetic: q_1 (start level)"
                    )
                    self.decay = gr.Slider(
                        0.0,
                        0.3,
                        value=defaults.decay,
                        step=0.005,
                        label="synthetic: decay per position (q_i = q_1 (1 - decay)^(i-1))",
                    )
                    self.noise = gr.Slider(0.0, 0.3, value=defaults.noise, step=0.01, label="synthetic: noise (std)")
                    self.seed = gr.Number(value=0, precision=0, minimum=0, label="synthetic: seed")
                    self.round = gr.Number(
                        value=0,
                        precision=0,
                        minimum=0,
                        elem_id="ls-teach-round",
                        label="last race: LibraSpec round (as numbered in the inspector)",
                    )
                    self.pasted = gr.Textbox(label="pasted list", placeholder="0.98, 0.95, 0.9, 0.7, ...", lines=2)
                with gr.Column():
                    with gr.Row():
                        self.alpha = gr.Slider(
                            ALPHA_MIN,
                            ALPHA_MAX,
                            value=defaults.alpha,
                            step=0.01,  # fine enough to hold a race's alpha (its field takes any number)
                            label="alpha",
                            elem_id="ls-teach-alpha",
                            scale=4,
                        )
                        self.suggest = gr.Button("Use suggested alpha", size="sm", elem_id="ls-teach-suggest", scale=1)
                    self.n = gr.Slider(
                        1,
                        32,
                        value=defaults.n,
                        step=1,
                        label="n (block size; a race round has its own)",
                        elem_id="ls-teach-n",
                    )
                    self.d_max = gr.Slider(1, D_MAX_CAP, value=defaults.d_max, step=1, label="d_max")
                    self.cost = gr.Radio(list(COSTS), value=defaults.cost, label="cost model for E[eta_d]")
                    self.t0 = gr.Slider(0.0, 100.0, value=defaults.t0_ms, step=0.5, label="linear: t0 (ms)")
                    self.c = gr.Slider(0.0, 10.0, value=defaults.c_ms, step=0.05, label="linear: c (ms per token)")
                    self.draft = gr.Slider(
                        0.0, 50.0, value=defaults.draft_ms, step=0.5, label="linear: drafting (ms per block)"
                    )
            self._show_controls(defaults)  # only the controls the chosen source and cost read
            with gr.Row():
                self.reset = gr.Button("Restart")
                self.prev = gr.Button("Previous step")
                self.next = gr.Button("Next step", variant="primary", elem_id="ls-teach-next")
                self.end = gr.Button("Run to end")
            self.index = gr.State(0)
            self.text = gr.Markdown(elem_id="ls-teach-text")
            with gr.Row():
                self.step_plot = gr.Plot(label="eps_i bounds at this step", show_label=False, elem_id="ls-teach-step")
                self.expected_plot = gr.Plot(
                    label="expected speedup vs d", show_label=False, elem_id="ls-teach-expected"
                )
            self._wire()  # inside the tab: gr.api adds a block that would split the tab bar

    def _show_controls(self, inputs: Inputs) -> None:
        """At build: the controls the defaults read are visible, the others hidden."""
        for control, update in zip(self._source_controls(), self.source_controls(inputs.source)):
            control.visible = update["visible"]
        for control, update in zip(self._cost_controls(), self.cost_controls(inputs.cost)):
            control.visible = update["visible"]

    def _source_controls(self) -> list:
        return [self.start, self.decay, self.noise, self.seed, self.round, self.pasted]

    def _cost_controls(self) -> list:
        return [self.t0, self.c, self.draft]

    @staticmethod
    def source_controls(source: str) -> tuple:
        """Visibility of (start, decay, noise, seed, round, pasted) for a confidence source: a teacher
        sees only what the chosen source reads (issue 45: unused sliders pushed the plot below the fold)."""
        synthetic, race, pasted = (source == name for name in SOURCES)
        return tuple(gr.update(visible=v) for v in (synthetic,) * 4 + (race, pasted))

    @staticmethod
    def cost_controls(cost: str) -> tuple:
        """Visibility of the linear cost's (t0, c, drafting): shown only when the linear cost prices E[eta_d]."""
        return tuple(gr.update(visible=cost == COSTS[1]) for _ in range(3))

    def _wire(self) -> None:
        controls = [
            self.source,
            self.start,
            self.decay,
            self.noise,
            self.seed,
            self.round,
            self.pasted,
            self.alpha,
            self.n,
            self.d_max,
            self.cost,
            self.t0,
            self.c,
            self.draft,
        ]
        outputs = [self.index, self.step_plot, self.expected_plot, self.text]
        # change, not input: the inspector's "open in step-through" sets the source too
        self.source.change(
            self.source_controls, [self.source], self._source_controls(), queue=False, api_visibility="private"
        )
        self.cost.change(self.cost_controls, [self.cost], self._cost_controls(), queue=False, api_visibility="private")
        self.controls, self.outputs = controls, outputs  # the race inspector's "open in step-through" chains them
        for button, handler in (
            (self.reset, self.restart),
            (self.prev, self.previous),
            (self.next, self.forward),
            (self.end, self.to_end),
        ):
            button.click(handler, [self.index, *controls], outputs, api_visibility="private")
        for control in controls:
            # the visitor's own changes only: a value set by another event (the inspector's "open in
            # step-through") comes with its own chain, which must not race with these
            event = control.release if isinstance(control, gr.Slider) else control.input
            if control in (self.source, self.round):  # a race round: the sliders take its settings first
                event(
                    self.adopt_race_round,
                    [self.index, *controls],
                    [self.alpha, self.n, self.d_max],
                    api_visibility="private",
                ).then(self.restart, [self.index, *controls], outputs, api_visibility="private")
                continue
            event(self.restart, [self.index, *controls], outputs, api_visibility="private")
        self.suggest.click(
            self.use_suggested_alpha, [self.index, *controls], [self.alpha], api_visibility="private"
        ).then(self.restart, [self.index, *controls], outputs, api_visibility="private")
        gr.api(self.algorithm_steps, api_name="algorithm_steps")

    def attach_load(self, demo: gr.Blocks) -> None:
        """Draw the first state when the page opens."""
        demo.load(
            self.opening, None, [self.index, self.step_plot, self.expected_plot, self.text], api_visibility="private"
        )

    def _show(self, request: gr.Request, index: int, values) -> tuple:
        inputs = Inputs(*values)
        runs = self.session.races.runs(client_key(request)) if inputs.source == SOURCES[1] else None
        measured = self.session.profile() if inputs.cost == COSTS[0] else None
        try:
            return step_view(inputs, index, runs, measured)
        except ValueError as error:  # said in the text, not a toast per keystroke; the old round goes
            return refused_view(str(error))

    def use_suggested_alpha(self, request: gr.Request, index, *values):
        """Set alpha to the value section 3.4 suggests for the state shown (see the text under the figures)."""
        inputs = Inputs(*values)
        runs = self.session.races.runs(client_key(request)) if inputs.source == SOURCES[1] else None
        try:
            alpha = suggested_slider_alpha(inputs, runs, self.session.profile() if inputs.cost == COSTS[0] else None)
        except ValueError as error:
            raise as_error(error) from error
        return gr.Slider(value=round(alpha, 2))

    def adopt_race_round(self, request: gr.Request, index, *values):
        """When the source is the last race round (or its round number changes): the alpha, n and d_max
        sliders take the values the race ran it with (issue 34: they showed 2.2 and 8 while the
        replay used 8 and 7); other sources leave the sliders alone."""
        inputs = Inputs(*values)
        if inputs.source != SOURCES[1]:
            return gr.skip(), gr.skip(), gr.skip()
        try:
            alpha, n, d_max = race_round_settings(inputs, self.session.races.runs(client_key(request)))
        except ValueError:
            return gr.skip(), gr.skip(), gr.skip()  # the view that follows says why
        return gr.Slider(value=alpha), gr.Slider(value=n), gr.Slider(value=d_max)

    def open_race_round(self, round_index):
        """This tab selected, showing LibraSpec round `round_index` of the visitor's last race priced by
        the measured profile (the race inspector's "open in step-through")."""
        return gr.Tabs(selected="teach"), SOURCES[1], int(round_index or 0), COSTS[0]

    def opening(self, request: gr.Request):
        return self.restart(request, 0, *dataclasses.astuple(Inputs()))

    def restart(self, request: gr.Request, index, *values):
        return self._show(request, 0, values)

    def previous(self, request: gr.Request, index, *values):
        return self._show(request, int(index or 0) - 1, values)

    def forward(self, request: gr.Request, index, *values):
        return self._show(request, int(index or 0) + 1, values)

    def to_end(self, request: gr.Request, index, *values):
        return self._show(request, 10**6, values)  # clamped to the last state

    def algorithm_steps(
        self, confidences: str, n: int = 8, alpha: float = RunSpec.alpha, d_max: int = RunSpec.d_max
    ) -> list[dict]:
        """Algorithm 1 over pasted confidences: every state (d, B, blocks, eps*, step, message)."""
        try:
            return pasted_states(confidences, n, alpha, d_max)
        except (TypeError, ValueError) as error:
            raise as_error(error) from error
