"""Algorithm step-through tab: Algorithm 1 one iteration per click (layout and wiring only).

Confidences q_i come from a LibraSpec round of the visitor's own last race, a synthetic
profile or a pasted list; `libraspec.analysis.stepper` produces the states (the same decisions as
`LibraSpecPolicy`), `libraspec.views.plots` draws them, and `libraspec.analysis.theory` gives the
expected speedup E[eta_d] under the chosen cost model (Eq. 1). No model work here.
Paper symbols: alpha, n, d, d_max, B, eps_i, q_i, tau.
"""
from __future__ import annotations

import dataclasses
import html

import gradio as gr
import numpy as np

from libraspec.views import tuning_plots
from libraspec.cost import LatencyProfile
from libraspec.analysis.stepper import algorithm_states, parse_confidences, synthetic_confidences
from libraspec.analysis.theory import auto_alpha, exhaustive_argmax, expected_tau_curve

from .common import client_key
from .session import Run, Session
from .settings import D_MAX_CAP

SOURCES = ("synthetic", "last race round", "pasted list")
COSTS = ("measured profile", "linear t0 + c*d")


@dataclasses.dataclass(frozen=True)
class Inputs:
    """Everything a step-through depends on (the tab's controls)."""

    source: str = "synthetic"
    start: float = 0.95
    decay: float = 0.04
    noise: float = 0.05
    seed: int = 0
    round_index: int = 0
    pasted: str = ""
    alpha: float = 2.2
    n: int = 8
    d_max: int = 24
    cost: str = "linear t0 + c*d"
    t0_ms: float = 20.0
    c_ms: float = 1.0
    draft_ms: float = 5.0


def confidences_for(inputs: Inputs, runs: list[Run] | None) -> tuple[np.ndarray, int, int, list[str]]:
    """(q, n, d_max, notes) for the chosen source (`runs`: the client's races, oldest first); d_max
    shrinks to the confidences available."""
    n, d_max, notes = int(inputs.n), int(inputs.d_max), []
    if inputs.source == "last race round":
        runs = [r for r in runs or [] if r.records.get("libraspec")]
        if not runs:
            raise ValueError("no race yet: run one on the Race tab, or pick synthetic / pasted confidences")
        rounds = [r for r in runs[-1].records["libraspec"] if r.blocks_drafted > 0]
        record = rounds[min(max(int(inputs.round_index), 0), len(rounds) - 1)]
        q = np.asarray(record.confidences)
        n = len(q) // record.blocks_drafted
        notes.append(f"LibraSpec round {record.round_index} of the last race (\"{runs[-1].prompt[:60]}\"): "
                     f"{record.blocks_drafted} block(s) of n = {n} drafted, d = {record.chosen_length} chosen "
                     f"with alpha = {runs[-1].settings.alpha:g}, d_max = {runs[-1].settings.d_max}.")
    elif inputs.source == "pasted list":
        q = parse_confidences(inputs.pasted)
    elif inputs.source == "synthetic":
        q = synthetic_confidences(-(-d_max // n) * n, float(inputs.start), float(inputs.decay),
                                  float(inputs.noise), int(inputs.seed))
    else:
        raise ValueError(f"unknown confidence source {inputs.source!r}")
    if q.size < n:
        raise ValueError(f"need at least one block of n = {n} confidences, got {q.size}")
    if d_max < n:
        notes.append(f"d_max raised from {d_max} to n = {n} (Algorithm 1 starts at d = n).")
        d_max = n
    if q.size < d_max:
        notes.append(f"d_max lowered from {d_max} to {q.size}: only {q.size} confidences are known.")
        d_max = int(q.size)
    return q, n, d_max, notes


def cost_profile(inputs: Inputs, n: int, d_max: int,
                 measured: LatencyProfile | None) -> tuple[LatencyProfile, str]:
    """The latency profile for E[eta_d]: the loaded pair's measured one, or t0 + c*k."""
    if inputs.cost == "measured profile":
        if measured is None:
            raise ValueError("the model is not loaded yet, so there is no measured profile: pick the linear cost")
        t0, c = measured.linear_fit()
        note = (f"measured profile of {measured.meta.get('pair', 'the loaded pair')}: fit t0 = {1000 * t0:.2f} ms, "
                f"c = {1000 * c:.3f} ms/token")
        if measured.n != n:
            note += f" (its drafting times are per block of n = {measured.n}, applied to n = {n})"
        return LatencyProfile(measured.verify_s, measured.draft_s, n, measured.meta), note
    for name, value in (("t0", inputs.t0_ms), ("c", inputs.c_ms), ("drafting per block", inputs.draft_ms)):
        if value is None or not np.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0 ms")
    if inputs.t0_ms + inputs.c_ms <= 0:
        raise ValueError("t0 + c must be > 0: a verification cannot be free")
    profile = LatencyProfile.from_linear(inputs.t0_ms / 1000, inputs.c_ms / 1000, max(inputs.draft_ms, 1e-6) / 1000,
                                         n, max(2, d_max + 1))
    return profile, (f"linear cost: verify t0 + c*k = {inputs.t0_ms:g} + {inputs.c_ms:g} k ms, "
                     f"drafting {inputs.draft_ms:g} ms per block")


def step_view(inputs: Inputs, index: int, runs: list[Run] | None = None, measured: LatencyProfile | None = None):
    """(clamped index, step figure, expected-speedup figure, markdown) for one state; `runs` and
    `measured` (the loaded pair's latency profile) serve the last-race source and the measured cost."""
    q, n, d_max, notes = confidences_for(inputs, runs)
    states = algorithm_states(q, n, float(inputs.alpha), d_max)
    index = min(max(int(index), 0), len(states) - 1)
    profile, cost_note = cost_profile(inputs, n, d_max, measured)
    final = states[-1].d
    best = exhaustive_argmax(q, profile, d_max)
    lines = [f"**Step {index} of {len(states) - 1}.** {html.escape(states[index].message)}", ""]
    lines += [f"{k}. {html.escape(s.message)}" for k, s in enumerate(states[1:index], start=1)] if index > 1 else []
    lines += ["", f"Run to the end, LibraSpec submits d = {final}; the exhaustive argmax of E[eta_d] over "
                  f"1..{d_max} is d = {best} ({cost_note})."]
    _, c = profile.linear_fit()
    if c > 0:
        tau = float(expected_tau_curve(q, final)[-1])
        lines.append(f"Section 3.4: these costs and E[tau] = {tau:.2f} at d = {final} suggest alpha = "
                     f"T_verify / (tau c) = {auto_alpha(profile, tau, final):.2f} (you chose {inputs.alpha:g}).")
    lines += [f"_{html.escape(note)}_" for note in notes]
    return (index, tuning_plots.stepper_figure(states, index, q, d_max),
            tuning_plots.expected_speedup_figure(q, profile, d_max, final, n), "\n".join(lines))


class TeachTab:
    """The "Algorithm step-through" tab inside an open `gr.Blocks`."""

    def __init__(self, session: Session):
        self.session = session

    def build(self) -> None:
        with gr.Tab("Algorithm step-through", id="teach"):
            gr.Markdown("Walk LibraSpec's Algorithm 1 one iteration at a time: each step compares "
                        "eps* = min_i eps_i with d, grows d when every bound lies above it, and stops "
                        "(with the single rollback) when one falls at or below d.")
            defaults = Inputs()
            with gr.Row():
                with gr.Column():
                    self.source = gr.Radio(list(SOURCES), value=defaults.source, label="confidences q_i from")
                    self.start = gr.Slider(0.0, 1.0, value=defaults.start, step=0.01,
                                           label="synthetic: q_1 (start level)")
                    self.decay = gr.Slider(0.0, 0.3, value=defaults.decay, step=0.005,
                                           label="synthetic: decay per position (q_i = q_1 (1 - decay)^(i-1))")
                    self.noise = gr.Slider(0.0, 0.3, value=defaults.noise, step=0.01, label="synthetic: noise (std)")
                    self.seed = gr.Number(value=0, precision=0, minimum=0, label="synthetic: seed")
                    self.round = gr.Number(value=0, precision=0, minimum=0, label="last race: LibraSpec round")
                    self.pasted = gr.Textbox(label="pasted list", placeholder="0.98, 0.95, 0.9, 0.7, ...", lines=2)
                with gr.Column():
                    self.alpha = gr.Slider(0.2, 6.0, value=defaults.alpha, step=0.1, label="alpha")
                    self.n = gr.Slider(1, 32, value=defaults.n, step=1,
                                       label="n (block size; a race round has its own)")
                    self.d_max = gr.Slider(1, D_MAX_CAP, value=defaults.d_max, step=1, label="d_max")
                    self.cost = gr.Radio(list(COSTS), value=defaults.cost, label="cost model for E[eta_d]")
                    self.t0 = gr.Slider(0.0, 100.0, value=defaults.t0_ms, step=0.5, label="linear: t0 (ms)")
                    self.c = gr.Slider(0.0, 10.0, value=defaults.c_ms, step=0.05, label="linear: c (ms per token)")
                    self.draft = gr.Slider(0.0, 50.0, value=defaults.draft_ms, step=0.5,
                                           label="linear: drafting (ms per block)")
            with gr.Row():
                self.reset = gr.Button("Restart")
                self.prev = gr.Button("Previous step")
                self.next = gr.Button("Next step", variant="primary", elem_id="ls-teach-next")
                self.end = gr.Button("Run to end")
            self.index = gr.State(0)
            self.text = gr.Markdown(elem_id="ls-teach-text")
            with gr.Row():
                self.step_plot = gr.Plot(label="eps_i bounds at this step", elem_id="ls-teach-step")
                self.expected_plot = gr.Plot(label="expected speedup vs d", elem_id="ls-teach-expected")
            self._wire()  # inside the tab: gr.api adds a block that would split the tab bar

    def _wire(self) -> None:
        controls = [self.source, self.start, self.decay, self.noise, self.seed, self.round, self.pasted,
                    self.alpha, self.n, self.d_max, self.cost, self.t0, self.c, self.draft]
        outputs = [self.index, self.step_plot, self.expected_plot, self.text]
        for button, handler in ((self.reset, self.restart), (self.prev, self.previous), (self.next, self.forward),
                                (self.end, self.to_end)):
            button.click(handler, [self.index, *controls], outputs, api_visibility="private")
        for control in controls:
            event = control.release if isinstance(control, gr.Slider) else control.change
            event(self.restart, [self.index, *controls], outputs, api_visibility="private")
        gr.api(self.algorithm_steps, api_name="algorithm_steps")

    def attach_load(self, demo: gr.Blocks) -> None:
        """Draw the first state when the page opens."""
        demo.load(self.opening, None, [self.index, self.step_plot, self.expected_plot, self.text],
                  api_visibility="private")

    def _show(self, request: gr.Request, index: int, values) -> tuple:
        inputs = Inputs(*values)
        runs = self.session.runs(client_key(request)) if inputs.source == SOURCES[1] else None
        measured = self.session.profile() if inputs.cost == COSTS[0] else None
        try:
            return step_view(inputs, index, runs, measured)
        except ValueError as error:
            raise gr.Error(str(error)) from error

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

    def algorithm_steps(self, confidences: str, n: int = 8, alpha: float = 2.2, d_max: int = 24) -> list[dict]:
        """Algorithm 1 over pasted confidences: every state (d, B, blocks, eps*, step, message)."""
        try:
            q, n, d_max, _ = confidences_for(Inputs(source="pasted list", pasted=confidences, n=int(n),
                                                    d_max=int(d_max)), None)
            states = algorithm_states(q, n, float(alpha), d_max)
        except (TypeError, ValueError) as error:
            raise gr.Error(str(error)) from error
        return [{"index": s.index, "d": s.d, "budget": s.budget, "blocks": s.blocks, "eps": list(s.eps),
                 "eps_star": s.eps_star, "reason": s.reason, "message": s.message} for s in states]
