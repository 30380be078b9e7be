"""Race and Round-inspector tabs: layout and wiring only (logic lives in `session`, `libraspec`).

Three modes decode the same prompt side by side (static n, LibraSpec alpha / d_max, the
oracle d*); the inspector shows the same run's figures (`libraspec.views.plots`). Every model
call runs in one queue (`concurrency_id="model"`, one at a time).
"""
from __future__ import annotations

import time

import gradio as gr

from libraspec.views import plots
from libraspec.models.registry import describe_pair
from libraspec.records import records_to_frame

from .common import QUEUE, client_key, load_examples
from .hosting import LOAD_SECONDS, gpu, race_seconds
from .render import column_html, legend_html, status_html, title
from .session import RACE_MODES, Run, Session, Snapshot
from .settings import D_MAX_CAP, MAX_NEW_TOKENS_CAP, TEMPERATURE_MAX, Settings

FIGURE_INTERVAL_S = 1.0  # figures refresh at most once a second during a run
EMPTY = records_to_frame([])


def _race_gpu_seconds(owner=None, prompt=None, alpha=None, d_max=None, static_length=None, temperature=None,
                      max_new_tokens=128, *rest, **named) -> int:
    """GPU seconds a Space reserves for one race call (same arguments as `_race_live` and `_race`)."""
    return race_seconds(named.get("max_new_tokens", max_new_tokens))


class RaceTabs:
    """Builds the two tabs inside an open `gr.Blocks` and wires them to one `Session`."""

    def __init__(self, session: Session):
        self.session = session
        # spaces.GPU on a Space, else unchanged; the client's key, not its request, crosses into a GPU call
        self._warm_up_gpu = gpu(lambda *args, **named: LOAD_SECONDS)(self.warm_up)
        self._race_live_gpu = gpu(_race_gpu_seconds)(self._race_live)
        self._race_gpu = gpu(_race_gpu_seconds)(self._race)

    # -- layout -------------------------------------------------------------------------------

    def build(self) -> None:
        self.status = gr.HTML(status_html("Model loads on first use."), elem_id="ls-status")
        with gr.Tab("Race", id="race"):
            self._race_layout()
        with gr.Tab("Round inspector", id="inspector"):
            self._inspector_layout()
            self._wire()  # inside the tab: gr.api adds a block that would split the tab bar

    def _race_layout(self) -> None:
        with gr.Row():
            with gr.Column(scale=3):
                self.prompt = gr.Textbox(label="Prompt", lines=3, max_lines=8, elem_id="ls-prompt",
                                         placeholder="Ask something, or pick an example below")
                examples = load_examples()
                gr.Examples([[e["prompt"]] for e in examples], inputs=[self.prompt],
                            example_labels=[f"{e['category']}: {e['prompt'][:48]}…" for e in examples],
                            label="Examples (math, code, chat)")
            with gr.Column(scale=2):
                self.alpha = gr.Slider(0.2, 6.0, value=2.2, step=0.1, label="alpha (LibraSpec trade-off)")
                self.d_max = gr.Slider(1, D_MAX_CAP, value=24, step=1, label="d_max (length cap, >= n)")
                self.static_length = gr.Slider(1, D_MAX_CAP, value=15, step=1,
                                               label="static length (default n, the block size)")
                self.temperature = gr.Slider(0.0, TEMPERATURE_MAX, value=0.0, step=0.05,
                                             label="temperature (0 = greedy)")
                self.max_new_tokens = gr.Slider(1, MAX_NEW_TOKENS_CAP, value=128, step=1, label="max new tokens",
                                                elem_id="ls-max-new")
                self.seed = gr.Number(value=0, precision=0, minimum=0, label="seed")
                offered = self.session.offered
                self.model = gr.Dropdown([(f"{name}: {describe_pair(name)}", name) for name in offered],
                                         value=self.session.model, label="model pair",
                                         elem_id="ls-model") if len(offered) > 1 else None
                with gr.Row():
                    self.run_button = gr.Button("Run race", variant="primary", elem_id="ls-run")
                    self.stop_button = gr.Button("Stop", variant="stop")
        gr.HTML(legend_html())
        with gr.Row(equal_height=False):
            self.columns = [gr.HTML(column_html(mode, None, None, None, "press Run race"),
                                    elem_id=f"ls-col-{mode}") for mode in RACE_MODES]
        with gr.Accordion("Downloads: this run's round records", open=False):
            self.run_id = gr.Textbox(label="run id", interactive=False, elem_id="ls-run-id")
            self.files = gr.File(label="round records (CSV, Parquet)", file_count="multiple", interactive=False)

    def _inspector_layout(self) -> None:
        gr.Markdown("Figures of the last race. Solid: chosen length d; dashed: the oracle's d* "
                    "for the same round state.")
        with gr.Row():
            self.length_plot = gr.Plot(plots.length_figure(EMPTY), label="chosen vs oracle length")
            self.speedup_plot = gr.Plot(plots.speedup_figure(EMPTY, None, None),
                                        label="cumulative speedup")
        with gr.Row():
            self.inspect_mode = gr.Dropdown([(title(m), m) for m in RACE_MODES], value="libraspec",
                                            label="mode to inspect")
            self.round = gr.Slider(0, 1, value=0, step=1, label="round (eps_i figure)")
        with gr.Row():
            self.heatmap_plot = gr.Plot(plots.confidence_heatmap(EMPTY), label="confidences q_i")
            self.eps_plot = gr.Plot(None, label="eps_i bounds and Algorithm 1 steps")
        with gr.Accordion("Latency profile of this machine", open=False):
            self.profile_plot = gr.Plot(None, label="latency profile")

    # -- wiring -------------------------------------------------------------------------------

    def _wire(self) -> None:
        inputs = [self.prompt, self.alpha, self.d_max, self.static_length, self.temperature,
                  self.max_new_tokens, self.seed, self.inspect_mode] + ([self.model] if self.model else [])
        outputs = [self.status, *self.columns, self.run_id, self.length_plot, self.speedup_plot,
                   self.heatmap_plot, self.eps_plot, self.round, self.profile_plot]
        click = self.run_button.click(self.race_live, inputs, outputs, api_visibility="undocumented",
                                      show_progress="minimal", **QUEUE)
        submit = self.prompt.submit(self.race_live, inputs, outputs, api_visibility="undocumented",
                                    show_progress="minimal", **QUEUE)
        self.stop_button.click(None, cancels=[click, submit]).then(
            lambda: status_html("Stopped. The next run starts cleanly."), None, [self.status], queue=False,
            api_visibility="private")
        self.run_id.change(self.export_trace, [self.run_id], [self.files], api_name="export_trace")
        self.inspect_mode.change(self.inspect_mode_changed, [self.run_id, self.inspect_mode],
                                 [self.heatmap_plot, self.eps_plot, self.round], api_visibility="private")
        self.round.release(self.inspect_round, [self.run_id, self.inspect_mode, self.round], [self.eps_plot],
                           api_visibility="private")
        gr.api(self.race, api_name="race", **QUEUE)
        if self.model is not None:
            self.model.change(self._warm_up_gpu, [self.model], self._warm_outputs(), api_visibility="private",
                              show_progress="hidden", **QUEUE)

    def warm_up(self, model: str | None = None):
        """Page load or a model choice: load the models once (status shown meanwhile), then set
        the n-dependent controls."""
        try:
            self.session.select(model)
            for line in self.session.load():
                yield status_html(line), gr.skip(), gr.skip(), gr.skip()
        except (ValueError, OSError, ImportError) as error:  # ImportError: a pair's package is missing
            yield status_html(f"Could not load the model: {error}"), gr.skip(), gr.skip(), gr.skip()
            raise gr.Error(f"could not load the model: {error}") from error
        n = self.session.n
        yield (status_html(f"Ready: {self.session.describe()}"),
               plots.profile_figure(self.session.profile()),
               gr.Slider(minimum=n), gr.Slider(value=n, label=f"static length (default n = {n})"))

    def _warm_outputs(self) -> list:
        return [self.status, self.profile_plot, self.d_max, self.static_length]

    def attach_load(self, demo: gr.Blocks) -> None:
        demo.load(self._warm_up_gpu, None, self._warm_outputs(), api_visibility="private", show_progress="hidden",
                  **QUEUE)

    # -- callbacks ----------------------------------------------------------------------------

    def race_live(self, request: gr.Request, prompt, alpha, d_max, static_length, temperature, max_new_tokens, seed,
                  inspect_mode, model=None):
        """Stream the race: columns at most 4 times a second, figures once a second, always the end."""
        yield from self._race_live_gpu(client_key(request), prompt, alpha, d_max, static_length, temperature,
                                       max_new_tokens, seed, inspect_mode, model)

    def _race_live(self, owner, prompt, alpha, d_max, static_length, temperature, max_new_tokens, seed,
                   inspect_mode, model):
        settings = Settings(alpha, d_max, static_length, temperature, max_new_tokens, seed)
        skip = (gr.skip(),) * 7  # run id and the six figure outputs
        figures_at = 0.0
        try:
            self.session.select(model)
            for snap in self.session.stream(prompt, settings, owner):
                if snap.run is None:
                    columns = [column_html(m, None, None, None, "waiting for the AR baseline…")
                               for m in RACE_MODES] if snap.phase == "baseline" else [gr.skip()] * 3
                    yield (status_html(snap.status, prompt), *columns, *skip)
                    continue
                due = snap.final or time.monotonic() - figures_at >= FIGURE_INTERVAL_S
                figures = self._figures(snap.run, inspect_mode, snap.final) if due else skip
                figures_at = time.monotonic() if due else figures_at
                yield (self._status(snap), *self._columns(snap.run), *figures)
        except (ValueError, OSError, ImportError) as error:  # ImportError: a pair's package is missing
            raise gr.Error(str(error)) from error

    def race(self, request: gr.Request, prompt: str, alpha: float = 2.2, d_max: int = 24, static_length: int = 0,
             temperature: float = 0.0, max_new_tokens: int = 128,
             seed: int = 0, model: str = "") -> tuple[str, str, str, dict]:
        """Race static, LibraSpec and oracle on one prompt (static_length 0 = n; model "" = the
        app's current pair, else one of the pairs the app offers).

        Returns the three output texts and a summary: settings, notes on clamped values, and
        per mode tokens, rounds, tau, tokens/s, speedups over AR (measured, modeled), finish rank.
        """
        return self._race_gpu(client_key(request), prompt, alpha, d_max, static_length, temperature,
                              max_new_tokens, seed, model)

    def _race(self, owner, prompt, alpha, d_max, static_length, temperature, max_new_tokens, seed, model):
        snap = None
        try:
            self.session.select(model)
            for snap in self.session.stream(prompt, Settings(alpha, d_max, static_length, temperature,
                                                            max_new_tokens, seed), owner):
                pass
        except (ValueError, OSError, ImportError) as error:  # ImportError: a pair's package is missing
            raise gr.Error(str(error)) from error
        run = snap.run
        return (*(run.text(mode) for mode in RACE_MODES), run.report())

    def export_trace(self, request: gr.Request, run_id: str) -> list[str] | None:
        """CSV and Parquet files of a run's round records (AR baseline included), by the id of one
        of this client's runs."""
        if not run_id:
            return None
        try:
            return self.session.export(run_id, client_key(request))
        except ValueError as error:
            raise gr.Error(str(error)) from error

    def inspect_mode_changed(self, request: gr.Request, run_id: str, mode: str):
        run = self._stored(run_id, client_key(request))
        if run is None:
            return gr.skip(), gr.skip(), gr.skip()
        return (plots.confidence_heatmap(run.frame(with_ar=False), mode), self._eps(run, mode, 0),
                self._round_slider(run, mode, 0))

    def inspect_round(self, request: gr.Request, run_id: str, mode: str, round_index: float):
        run = self._stored(run_id, client_key(request))
        return gr.skip() if run is None else self._eps(run, mode, int(round_index))

    # -- views --------------------------------------------------------------------------------

    def _stored(self, run_id: str, owner: str) -> Run | None:
        try:
            return self.session.get_run(run_id, owner)
        except ValueError:
            return None

    def _status(self, snap: Snapshot) -> str:
        run = snap.run
        ar_s, _ = run.ar_per_token()
        ar = f" · AR baseline {1.0 / ar_s:.1f} tok/s" if ar_s else ""
        return status_html(f"{snap.status} {self.session.describe()}{ar}", run.prompt, run.notes)

    def _columns(self, run: Run) -> list[str]:
        return [column_html(m, run.segments.get(m), run.summary(m), run.rank(m)) for m in RACE_MODES]

    @staticmethod
    def _round_slider(run: Run, mode: str, value: int):
        return gr.Slider(maximum=max(len(run.records.get(mode, [])) - 1, 1), value=value)

    def _eps(self, run: Run, mode: str, round_index: int):
        records = run.records.get(mode, [])
        if not records:
            return None
        row = run.frame(with_ar=False).query("mode == @mode and round_index == @round_index")
        if row.empty:
            return None
        return plots.epsilon_figure(row.iloc[0], run.settings.alpha)

    def _figures(self, run: Run, mode: str, final: bool) -> tuple:
        frame = run.frame(with_ar=False)
        ar_s, ar_modeled = run.ar_per_token()
        last = 0 if final else run.last_drafted_round(mode)  # live: newest decision; done: the start
        return (run.run_id if final else gr.skip(), plots.length_figure(frame),
                plots.speedup_figure(frame, ar_s, ar_modeled), plots.confidence_heatmap(frame, mode),
                self._eps(run, mode, last), self._round_slider(run, mode, last),
                plots.profile_figure(self.session.profile()) if final else gr.skip())
