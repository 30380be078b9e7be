"""The Round inspector tab: layout, wiring and what it shows of one stored race.

It reads a visitor's runs through `Session.races` and draws them with `libraspec.views.plots`
(like every tab's figures): the chosen vs oracle lengths, the cumulative speedup, the q_i
heatmap, one round's eps_i bounds and Algorithm 1 steps, its narrative (`race_words.round_info`)
and, for a tree mode, the round's draft tree and the tree sizes. The race tab (`race_tab`) fills
it while a race runs (`figures`); the visitor then moves through the rounds here.
"""

from __future__ import annotations

import time

import gradio as gr

from libraspec.modes import PAPER
from libraspec.profiling import PROFILE_TOLERANCE
from libraspec.records import interesting_rounds, records_to_frame
from libraspec.views import plots

from .common import QUEUE, as_error, client_key
from .hosting import LOAD_SECONDS, gpu
from .race_words import round_info, tree_reasons
from .render import title
from .run import RACE_MODES, Run
from .session import Session
from .stepthrough import check_start

EMPTY = records_to_frame([])


class InspectorTab:
    """The inspector's components, its callbacks and its views of a `Run`, over one `Session`."""

    def __init__(self, session: Session):
        self.session = session
        self._run_id: gr.Textbox | None = None  # the race's run id, given by `wire`
        self._remeasure_gpu = gpu(lambda *args, **named: LOAD_SECONDS)(self.remeasure_profile)

    # -- layout -------------------------------------------------------------------------------

    def layout(self) -> None:
        gr.Markdown(
            "Figures of your last race. Lines: the chosen length d of each mode; diamonds: the "
            "oracle's d* for the same round state."
        )
        with gr.Row():
            self.length_plot = gr.Plot(
                plots.length_figure(EMPTY), label="chosen vs oracle length", show_label=False, elem_id="ls-length-plot"
            )
            self.speedup_plot = gr.Plot(
                plots.speedup_figure(EMPTY, None, None),
                label="cumulative speedup",
                show_label=False,
                elem_id="ls-speedup-plot",
            )
        with gr.Row():
            self.mode = gr.Dropdown(
                [(title(m), m) for m in RACE_MODES],
                value=PAPER,
                label="mode to inspect",
                elem_id="ls-inspect-mode",
            )
            self.round = gr.Slider(0, 1, value=0, step=1, label="round", elem_id="ls-round")
            self.jump = gr.Dropdown(
                [],
                value=None,
                label="interesting rounds",
                info="most iterations, an extend, a roll-back, the largest |d - d*|",
                elem_id="ls-jump",
            )
            self.to_teach = gr.Button(
                "Open this round in the step-through", size="sm", elem_id="ls-open-teach", scale=0
            )
        self.round_text = gr.Markdown("Run a race to inspect its rounds.", elem_id="ls-round-info")
        with gr.Row():  # tree modes only
            self.tree_plot = gr.Plot(
                None, label="draft tree of the round", show_label=False, elem_id="ls-tree-plot", visible=False, scale=3
            )
            self.tree_size_plot = gr.Plot(
                None, label="tree size per round", show_label=False, elem_id="ls-tree-size-plot", visible=False, scale=2
            )
        with gr.Row():
            self.heatmap_plot = gr.Plot(
                plots.confidence_heatmap(EMPTY), label="confidences q_i", show_label=False, elem_id="ls-heatmap-plot"
            )
            self.eps_plot = gr.Plot(
                None, label="eps_i bounds and Algorithm 1 steps", show_label=False, elem_id="ls-eps-plot"
            )
        with gr.Accordion("Latency profile of this machine", open=False):
            with gr.Row():
                self.remeasure_button = gr.Button(
                    "Re-measure latency profile", size="sm", elem_id="ls-remeasure", scale=0
                )
                self.profile_text = gr.Markdown(
                    "Modeled times come from this profile. A race whose AR baseline is more than "
                    f"{PROFILE_TOLERANCE:.0%} off it re-measures it; measure it again here after the machine's "
                    "load changed.",
                    elem_id="ls-profile-info",
                )
            self.profile_plot = gr.Plot(None, label="latency profile", show_label=False)

    def outputs(self) -> list:
        """Every component a race fills (`figures`)."""
        return [
            self.length_plot,
            self.speedup_plot,
            self.heatmap_plot,
            self.eps_plot,
            self.round,
            self.profile_plot,
            self.round_text,
            self.mode,
            self.tree_plot,
            self.tree_size_plot,
        ]

    # -- wiring -------------------------------------------------------------------------------

    def wire(self, run_id: gr.Textbox) -> None:
        """The inspector's own events, on the race's `run_id` (the run it shows)."""
        self._run_id = run_id
        self.mode.change(self.interesting, [run_id, self.mode], [self.jump], queue=False, api_visibility="private")
        self.jump.input(
            self.jump_to_round,
            [run_id, self.mode, self.jump],
            [self.round, self.eps_plot, self.round_text, self.tree_plot, self.heatmap_plot, self.length_plot],
            api_visibility="private",
        )
        self.mode.change(
            self.mode_changed,
            [run_id, self.mode],
            [
                self.heatmap_plot,
                self.eps_plot,
                self.round,
                self.round_text,
                self.tree_plot,
                self.tree_size_plot,
                self.length_plot,
            ],
            api_visibility="private",
        )
        # input: every change the visitor makes (dragging, arrow keys, typing), never the race's own updates
        self.round.input(
            self.inspect_round,
            [run_id, self.mode, self.round],
            [self.eps_plot, self.round_text, self.tree_plot, self.heatmap_plot, self.length_plot],
            api_visibility="private",
            trigger_mode="always_last",
        )
        self.remeasure_button.click(
            self._remeasure_gpu, None, [self.profile_plot, self.profile_text], api_visibility="private", **QUEUE
        )

    def link_teach(self, teach, tabs: gr.Tabs) -> None:
        """The button "Open this round in the step-through", after `wire`: once the inspected round is
        one the step-through can replay (`check_teach_round`), that tab shows it
        (`TeachTab.open_race_round`), takes the race's alpha, n and d_max and draws its first step."""
        if self._run_id is None:
            raise RuntimeError("wire the inspector to the race's run id before linking the step-through")
        every = [teach.index, *teach.controls]
        self.to_teach.click(self.check_teach_round, [self._run_id, self.mode], None, api_visibility="private").success(
            teach.open_race_round, [self.round], [tabs, teach.source, teach.round, teach.cost], api_visibility="private"
        ).success(teach.adopt_race_round, every, [teach.alpha, teach.n, teach.d_max], api_visibility="private").success(
            teach.restart, every, teach.outputs, api_visibility="private"
        )

    # -- callbacks ----------------------------------------------------------------------------

    def check_teach_round(self, request: gr.Request, run_id: str, mode: str) -> None:
        """Refuse, saying why, what the step-through cannot replay: no race, a mode other than
        LibraSpec, a race older than the visitor's last LibraSpec race."""
        owner = client_key(request)
        run = self._stored(run_id, owner)
        if run is None:
            raise as_error("Run a race first: the step-through replays a round of your last race.")
        if mode != PAPER:
            raise as_error(
                f"The step-through walks LibraSpec's Algorithm 1: choose LibraSpec as the mode to inspect "
                f"(this is {title(mode)})."
            )
        latest = [r for r in self.session.races.runs(owner) if r.records.get(PAPER)]
        if not latest or latest[-1].run_id != run.run_id:
            raise as_error("The step-through replays your last race with LibraSpec; this is an older one.")
        try:
            check_start(run)
        except ValueError as error:
            raise as_error(str(error)[0].upper() + str(error)[1:] + ".") from error

    def mode_changed(self, request: gr.Request, run_id: str, mode: str):
        """Another mode chosen: its first drafted round, everywhere (nothing without a stored run)."""
        run = self._stored(run_id, client_key(request))
        if run is None or mode not in run.modes:
            return gr.skip()
        first = self._first_round(run, mode)
        frame = run.frame(with_ar=False)
        return (
            plots.confidence_heatmap(frame, mode, highlight=first),
            self._eps(run, frame, mode, first),
            self._round_slider(run, mode, first),
            round_info(run, mode, first),
            self._tree(run, mode, first),
            self._tree_sizes(frame, mode),
            plots.length_figure(frame, highlight=(mode, first)),
        )

    def interesting(self, request: gr.Request, run_id: str, mode: str):
        """The inspected mode's rounds worth showing first (`records.interesting_rounds`), one click away."""
        run = self._stored(run_id, client_key(request))
        if run is None or mode not in run.modes:
            return gr.update(choices=[], value=None)
        return gr.update(choices=interesting_rounds(run.records.get(mode, [])), value=None)

    def jump_to_round(self, request: gr.Request, run_id: str, mode: str, round_index):
        """An interesting round chosen: the slider moves there and the inspector shows it."""
        if round_index is None:
            return gr.skip()
        shown = self.inspect_round(request, run_id, mode, round_index)
        return gr.skip() if shown == gr.skip() else (gr.update(value=int(round_index)), *shown)

    def inspect_round(self, request: gr.Request, run_id: str, mode: str, round_index: float):
        run = self._stored(run_id, client_key(request))
        if run is None or round_index is None or mode not in run.modes:
            return gr.skip()
        frame, shown = run.frame(with_ar=False), int(round_index)
        return (
            self._eps(run, frame, mode, shown),
            round_info(run, mode, shown),
            self._tree(run, mode, shown),
            plots.confidence_heatmap(frame, mode, highlight=shown),
            plots.length_figure(frame, highlight=(mode, shown)),
        )

    def remeasure_profile(self):
        """The profile figure and what changed, after measuring the latency profile again."""
        start = time.perf_counter()
        try:
            old, new = self.session.remeasure_profile()
        except ValueError as error:
            return gr.skip(), f"⚠ Not re-measured: {error}"
        (t0, c), (old_t0, old_c) = new.linear_fit(), old.linear_fit()
        return (
            plots.profile_figure(new),
            f"Re-measured in {time.perf_counter() - start:.1f} s: an AR step now takes "
            f"{1000 * new.ar_token_time():.1f} ms (was {1000 * old.ar_token_time():.1f} ms), verification "
            f"{1000 * t0:.1f} + {1000 * c:.2f} k ms (was {1000 * old_t0:.1f} + {1000 * old_c:.2f} k ms). "
            "Races from now on are modeled with it.",
        )

    # -- views --------------------------------------------------------------------------------

    def figures(self, run: Run, mode: str, final: bool, first: bool) -> dict:
        """What a race shows here, by component: live, its newest decision; at the end, the inspected
        mode's first drafted round and the profile with the verified rows used. The mode dropdown
        offers the run's modes on the run's first figures and its last (in between a visitor may be
        choosing)."""
        mode = self._inspected(run, mode)
        frame = run.frame(with_ar=False)
        ar_s, ar_modeled = run.ar_per_token()
        shown = self._first_round(run, mode) if final else run.last_drafted_round(mode)
        out = {
            self.length_plot: plots.length_figure(frame, highlight=(mode, shown)),
            self.speedup_plot: plots.speedup_figure(frame, ar_s, ar_modeled),
            self.heatmap_plot: plots.confidence_heatmap(frame, mode, highlight=shown),
            self.eps_plot: self._eps(run, frame, mode, shown),
            self.round: self._round_slider(run, mode, shown),
            self.round_text: round_info(run, mode, shown),
            self.tree_plot: self._tree(run, mode, shown),
            self.tree_size_plot: self._tree_sizes(frame, mode),
        }
        if first or final:
            out[self.mode] = gr.Dropdown(choices=[(title(m), m) for m in run.modes], value=mode)
        if final:
            out[self.profile_plot] = plots.profile_figure(
                self.session.profile(), used_k=run.verified_rows(), context=run.longest_context()
            )
        return out

    def _stored(self, run_id: str, owner: str) -> Run | None:
        try:
            return self.session.races.get_run(run_id, owner)
        except ValueError:
            return None

    @staticmethod
    def _first_round(run: Run, mode: str) -> int:
        return next((r.round_index for r in run.records.get(mode, []) if r.chosen_length > 0), 0)

    @staticmethod
    def _round_slider(run: Run, mode: str, value: int):
        return gr.Slider(maximum=max(len(run.records.get(mode, [])) - 1, 1), value=value)

    @staticmethod
    def _inspected(run: Run, mode: str) -> str:
        """The mode shown: the one chosen when this run raced it, else its first tree mode,
        LibraSpec or its first mode."""
        if mode in run.modes:
            return mode
        return next((m for m in run.modes if plots.is_tree_mode(m)), PAPER if PAPER in run.modes else run.modes[0])

    @staticmethod
    def _eps(run: Run, frame, mode: str, round_index: int):
        """The round's eps_i figure, from the run's `frame` (its records, AR left out)."""
        if not run.records.get(mode):
            return None
        row = frame.query("mode == @mode and round_index == @round_index")
        if row.empty:
            return None
        return plots.epsilon_figure(row.iloc[0], run.settings.alpha)

    def _tree(self, run: Run, mode: str, round_index: int):
        """The round's draft tree (tree modes; hidden for chain modes), its root labelled with the
        token the previous round committed last."""
        records = {r.round_index: r for r in run.records.get(mode, [])}
        if not plots.is_tree_mode(mode) or round_index not in records:
            return gr.Plot(visible=False)
        text = self.session.token_text(run.model)
        previous = records.get(round_index - 1)
        root = text(previous.committed_tokens[-1]) if previous is not None and previous.committed_tokens else None
        reasons = tree_reasons(run, mode, records[round_index], self.session.profile_now(), self._pair_name())
        return gr.Plot(plots.tree_figure(records[round_index], text, root, reasons), visible=True)

    def _pair_name(self) -> str | None:
        return self.session.pair.name if self.session.pair is not None else None

    @staticmethod
    def _tree_sizes(frame, mode: str):
        """Tree size and accepted length per round (tree modes; hidden for chain modes)."""
        if not plots.is_tree_mode(mode):
            return gr.Plot(visible=False)
        return gr.Plot(plots.tree_size_figure(frame, mode), visible=True)
