"""The Race tab: layout and wiring only (logic lives in `session`, `libraspec`).

Up to three modes decode the same prompt side by side (default: static n, LibraSpec alpha /
d_max, the oracle d*; any policy, oracle or tree mode of the registry can be chosen, one column
each) with the drafter chosen next to the model; the Round inspector tab (`inspector_tab`) shows
the same run's figures. Every model call runs in one queue (`concurrency_id="model"`, one at a time).

The form's values reach the session as one `RaceForm` (named, built in `RaceForm.of`), and the
handlers answer with updates by component: what they leave out stays as it is.

The settings are plain number fields: `RunSpec.checked` under the app's caps clamps what is out
of range, on leaving the field (`ui.settings.check_settings`) and once when a race starts
(`Races.prepare`), and each clamp is written under its field. Run is disabled while a race runs
and the settings fold away, so the columns stay in view. A refused input (an empty prompt, a
value that is no number) is reported in the status line; the previous run's results stay as
they were, unmarked.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time

import gradio as gr
import pandas as pd

from libraspec.drafters import DRAFTER_TITLES, DRAFTERS
from libraspec.models.registry import describe_pair
from libraspec.paths import read_examples
from libraspec.spec import N_DEFAULT, RunSpec
from libraspec.views import plots

from .common import QUEUE, as_error, client_key
from .history import COLUMNS as HISTORY_COLUMNS
from .history import history_frame, history_notes
from .hosting import LOAD_SECONDS, gpu, race_seconds
from .inspector_tab import InspectorTab
from .race_words import run_report, verdict
from .races import Snapshot
from .render import column_html, legend_html, status_html, title
from .run import RACE_MODES, Run
from .session import Session
from .settings import FIELDS, RACE_COLUMNS, RACEABLE, UNSET_AT_ZERO, allowed, check_race_modes, check_settings
from .whatif import WhatIf

FIGURE_INTERVAL_S = 1.0  # figures refresh at most once a second during a run
LABELS = {
    "alpha": "alpha (LibraSpec trade-off)",
    "d_max": "d_max (length cap)",
    "static_length": "static length (0 = n)",
    "temperature": "temperature (0 = greedy)",
    "max_new_tokens": "max new tokens",
    "seed": "seed",
    "tree_depth": "tree depth (0 = n)",
    "node_budget": "node budget (trees)",
    "libraspec_start": "LibraSpec start (0 = n)",
}
DEFAULTS = RunSpec(static_length=0, tree_depth=0, libraspec_start=0)
ZERO_KEPT = (*N_DEFAULT, *UNSET_AT_ZERO)  # fields whose 0 a check leaves as 0 (n, or unset)
ELEM_IDS = {name: f"ls-{name.replace('_', '-')}" for name in FIELDS} | {"max_new_tokens": "ls-max-new"}
RUN_LABEL = "Run race"


FORM = ("prompt", *FIELDS, "inspect_mode", "drafter", "modes", "model")  # the live race's inputs, in order


@dataclasses.dataclass(frozen=True)
class RaceForm:
    """What a visitor asked of one race, by name: the form's values (or the `race` API's arguments)."""

    prompt: str | None
    settings: RunSpec  # as typed: `Races.stream` checks it once
    inspect_mode: str | None = None
    drafter: str | None = None
    modes: object = None  # a list (the form), a comma-separated string (the API) or None
    model: str | None = None

    @classmethod
    def of(cls, values: dict) -> RaceForm:
        """From values by name (`FORM`'s; a missing one is None: the form has no model field with one pair)."""
        return cls(
            values.get("prompt"),
            RunSpec(**{name: values[name] for name in FIELDS if name in values}),
            *(values.get(name) for name in ("inspect_mode", "drafter", "modes", "model")),
        )


def _race_gpu_seconds(owner=None, form: RaceForm | None = None) -> int:
    """GPU seconds a Space reserves for one race call (the arguments of `_race_live` and `_race`)."""
    return race_seconds(form.settings.max_new_tokens if form is not None else RunSpec.max_new_tokens)


def field_info(name: str, n: int | None, note: str | None = None) -> str:
    """The line under a settings field (plain text): the allowed range, or what the check changed."""
    if note:
        return f"⚠ corrected: {note}"
    low, high = allowed(name, n)
    if name == "d_max":
        return (
            f"allowed {n}..{high:d} (Algorithm 1 starts at d = n = {n})"
            if n
            else f"allowed n..{high:d}; n, the block size, is known once the model has loaded"
        )
    if name in N_DEFAULT:
        return f"0 = n{f' = {n}' if n else ''}; allowed {low:d}..{high:d}"
    if name in UNSET_AT_ZERO:  # LibraSpec's first d (Algorithm 1 line 4): unset, the n of the drafter that runs
        return f"0 = the drafter's n (Algorithm 1 as written); allowed {low:d}..d_max"
    return f"allowed {low:g}..{high:g}" if isinstance(low, float) else f"allowed {low:d}..{high:d}"


def _example_label(example: dict) -> str:
    """ "category: prompt", cut at a word beyond 60 characters."""
    prompt = example["prompt"]
    if len(prompt) > 60:
        prompt = prompt[:60].rsplit(" ", 1)[0] + " …"
    return f"{example['category']}: {prompt}"


def _is_a_number(name: str, value, n: int) -> bool:
    """Whether field `name` alone passes the spec's number check (a form's empty field does not)."""
    try:
        check_settings(RunSpec(**{name: value}), n)
    except ValueError:
        return False
    return True


class RaceTabs:
    """Builds the two tabs inside an open `gr.Blocks` and wires them to one `Session`."""

    def __init__(self, session: Session, whatif: WhatIf | None = None):
        """`whatif`: the app's one `WhatIf`, whose recommendation "Use suggested alpha" sets."""
        self.session, self.whatif = session, whatif
        self.inspector = InspectorTab(session)
        # spaces.GPU on a Space, else unchanged; the client's key, not its request, crosses into a GPU call
        self._warm_up_gpu = gpu(lambda *args, **named: LOAD_SECONDS)(self.warm_up)
        self._race_live_gpu = gpu(_race_gpu_seconds)(self._race_live)
        self._race_gpu = gpu(_race_gpu_seconds)(self._race)

    # -- layout -------------------------------------------------------------------------------

    def build_status(self) -> None:
        """The status line above the tabs (every tab's runs report there)."""
        self.status = gr.HTML(
            status_html("Loading the model…" if not self.session.loaded else "Ready."), elem_id="ls-status"
        )

    def build(self) -> None:
        """The Race and Round inspector tabs, inside the app's `gr.Tabs` (after `build_status`)."""
        with gr.Tab("Race", id="race"):
            self._race_layout()
        with gr.Tab("Round inspector", id="inspector"):
            self.inspector.layout()
            self._wire()  # inside the tab: gr.api adds a block that would split the tab bar

    def _race_layout(self) -> None:
        n = self.session.n
        with gr.Row(equal_height=True):
            self.prompt = gr.Textbox(
                label="Prompt",
                lines=2,
                max_lines=6,
                elem_id="ls-prompt",
                scale=6,
                placeholder="Ask something, or pick an example under Settings and examples",
            )
            with gr.Column(scale=2, min_width=240):
                offered = self.session.offered
                self.model = (
                    gr.Dropdown(
                        [(f"{name}: {describe_pair(name)}", name) for name in offered],
                        value=self.session.model,
                        label="model pair",
                        elem_id="ls-model",
                    )
                    if len(offered) > 1
                    else None
                )
                self.drafter = gr.Dropdown(
                    [(DRAFTER_TITLES[d], d) for d in DRAFTERS],
                    value=self.session.default_drafter or DRAFTERS[0],
                    label="drafter",
                    elem_id="ls-drafter",
                )
            with gr.Column(scale=1, min_width=140):
                self.run_button = gr.Button(
                    RUN_LABEL if self.session.loaded else "Loading the model…",
                    variant="primary",
                    elem_id="ls-run",
                    interactive=self.session.loaded,
                )
                self.stop_button = gr.Button("Stop", variant="stop", elem_id="ls-stop")
        with gr.Accordion("Settings and examples", open=True, elem_id="ls-settings") as self.settings_box:
            self.race_modes = gr.Dropdown(
                [(title(m), m) for m in RACEABLE],
                value=list(RACE_MODES),
                multiselect=True,
                max_choices=RACE_COLUMNS,
                elem_id="ls-race-modes",
                label=f"modes to race (up to {RACE_COLUMNS}, one column each)",
            )
            with gr.Row():
                self.fields = {
                    name: gr.Number(
                        getattr(DEFAULTS, name),
                        label=LABELS[name],
                        info=field_info(name, n),
                        elem_id=ELEM_IDS[name],
                        step=0.1 if name in ("alpha", "temperature") else 1,
                        min_width=140,
                    )
                    for name in FIELDS
                }
            with gr.Row():
                self.suggest_button = gr.Button("Use suggested alpha", size="sm", elem_id="ls-suggest", scale=0)
                gr.Markdown(
                    "Sets alpha to section 3.4's T_verify / (tau c) from this machine's latency profile "
                    "and your last race's LibraSpec rounds."
                )
            examples = read_examples()
            gr.Examples(
                [[e["prompt"]] for e in examples],
                inputs=[self.prompt],
                example_labels=[_example_label(e) for e in examples],
                label="Examples (math, code, chat)",
            )
        gr.HTML(legend_html())
        with gr.Row(equal_height=False):  # one column per raceable mode, shown while it is chosen
            self.columns = [
                gr.HTML(
                    column_html(mode, None, None, None, "press Run race"),
                    elem_id=f"ls-col-{mode}",
                    visible=mode in RACE_MODES,
                )
                for mode in RACEABLE
            ]
        with gr.Accordion("Your tries: every finished race side by side", open=False, elem_id="ls-history"):
            self.history_notes = gr.Markdown("No finished race yet.", elem_id="ls-history-notes")
            self.history_table = gr.Dataframe(
                pd.DataFrame(columns=HISTORY_COLUMNS), interactive=False, elem_id="ls-history-table"
            )
            self.history_file = gr.File(label="your tries (CSV)", interactive=False)
        with gr.Accordion("Downloads: this run's round records", open=False):
            self.run_id = gr.Textbox(label="run id", interactive=False, elem_id="ls-run-id")
            self.files = gr.File(
                label="round records (CSV, Parquet)", file_count="multiple", interactive=False, elem_id="ls-files"
            )

    # -- wiring -------------------------------------------------------------------------------

    def _form_components(self) -> dict:
        """`FORM`'s components by name (no model field when the app offers one pair)."""
        named = {"prompt": self.prompt, **self.fields, "inspect_mode": self.inspector.mode}
        named |= {"drafter": self.drafter, "modes": self.race_modes, "model": self.model}
        return {name: named[name] for name in FORM if named[name] is not None}

    def _wire(self) -> None:
        fields = [self.fields[name] for name in FIELDS]
        inputs = list(self._form_components().values())
        outputs = [self.status, *self.columns, self.run_id, *self.inspector.outputs(), *fields]
        inspector = self.inspector
        races = []
        for trigger, api in (
            (self.run_button.click, dict(api_name="race_live", api_visibility="undocumented")),
            (self.prompt.submit, dict(api_visibility="private")),
        ):
            started = trigger(
                self.lock,
                None,
                [self.run_button, self.settings_box, self.status],
                queue=False,
                api_visibility="private",
            )
            race = started.then(self.race_live, inputs, outputs, show_progress="hidden", **api, **QUEUE)
            race.then(self.unlock, None, [self.run_button], queue=False, api_visibility="private").then(
                inspector.interesting,
                [self.run_id, inspector.mode],
                [inspector.jump],
                queue=False,
                api_visibility="private",
            ).then(
                self.history,
                None,
                [self.history_notes, self.history_table, self.history_file],
                queue=False,
                api_visibility="private",
            )
            races.append(race)
        self.stop_button.click(None, cancels=races).then(
            lambda: (status_html("Stopped. The next run starts cleanly."), gr.Button(RUN_LABEL, interactive=True)),
            None,
            [self.status, self.run_button],
            queue=False,
            api_visibility="private",
        )
        for name, field in self.fields.items():  # only the field left: another may be in the middle of an edit
            for event in (field.blur, field.submit):
                event(functools.partial(self.check_field, name), fields, [field], queue=False, api_visibility="private")
        self.suggest_button.click(
            self.use_suggested_alpha, [self.drafter], [self.fields["alpha"]], queue=False, api_visibility="private"
        )
        self.race_modes.change(
            self.show_columns, [self.race_modes], self.columns, queue=False, api_visibility="private"
        )
        self.run_id.change(self.export_trace, [self.run_id], [self.files], api_name="export_trace")
        inspector.wire(self.run_id)
        gr.api(self.race, api_name="race", **QUEUE)
        if self.model is not None:
            self.model.change(
                self._warm_up_gpu,
                [self.model],
                self._warm_outputs(),
                api_visibility="private",
                show_progress="hidden",
                **QUEUE,
            )

    @staticmethod
    def lock():
        """A race starts: Run is disabled, the settings fold away, so the columns are in view, and the
        status says the race waits its turn (a previous refusal must not stand beside a queued race)."""
        return (
            gr.Button("Running…", interactive=False),
            gr.Accordion(open=False),
            status_html("Queued: the race starts when the model is free…"),
        )

    @staticmethod
    def unlock():
        return gr.Button(RUN_LABEL, interactive=True)

    def page_opened(self):
        """A page opens: Ready at once when the pair is loaded and profiled, else the loading state
        (Run disabled until `warm_up` has loaded the pair)."""
        if self.session.ready:
            return self._ready()
        return self._loading(f"Loading {self.session.model} (first use only)…")

    def warm_up(self, model: str | None = None):
        """After the page opens or a model is chosen: load the models once (status shown meanwhile),
        then set the n-dependent fields and the pair's default drafter, and enable Run. Nothing
        changes when the pair was ready already (`page_opened` showed it)."""
        if self.session.ready and model in (None, "", self.session.model):
            yield gr.skip()
            return
        try:
            self.session.select(model)
            for line in self.session.load():
                yield self._loading(line)
        except (ValueError, OSError, ImportError) as error:  # ImportError: a pair's package is missing
            message = status_html(f"Could not load the model: {error}", error=True)
            yield {self.status: message, self.run_button: gr.Button(RUN_LABEL, interactive=True)}
            return
        yield self._ready()

    def _loading(self, line: str) -> dict:
        return {self.status: status_html(line), self.run_button: gr.Button("Loading the model…", interactive=False)}

    def _ready(self) -> dict:
        n, times = self.session.n, self.session.load_seconds
        took = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in times.items())
        progress = f"load times: {took}" if took else ""
        return {
            self.status: status_html(f"Ready: {self.session.describe()}", progress=progress),
            self.inspector.profile_plot: plots.profile_figure(self.session.profile()),
            self.fields["d_max"]: gr.Number(info=field_info("d_max", n)),
            **{self.fields[name]: gr.Number(value=n, info=field_info(name, n)) for name in N_DEFAULT},
            self.drafter: gr.Dropdown(value=self.session.default_drafter),
            self.run_button: gr.Button(RUN_LABEL, interactive=True),
        }

    def _warm_outputs(self) -> list:
        return [
            self.status,
            self.inspector.profile_plot,
            self.fields["d_max"],
            *(self.fields[name] for name in N_DEFAULT),
            self.drafter,
            self.run_button,
        ]

    def attach_load(self, demo: gr.Blocks) -> None:
        outputs = self._warm_outputs()
        demo.load(self.page_opened, None, outputs, queue=False, api_visibility="private", show_progress="hidden").then(
            self._warm_up_gpu, None, outputs, api_visibility="private", show_progress="hidden", **QUEUE
        )

    # -- callbacks ----------------------------------------------------------------------------

    def check_field(self, name: str, *values):
        """Leaving field `name`: its corrected value and what was corrected, or its allowed range. Another
        field that is not a number yet does not hide this one's check: it is checked at its default."""
        n = self.session.n
        given = dict(zip(FIELDS, values))
        kept = {key: value for key, value in given.items() if key == name or _is_a_number(key, value, n or 1)}
        try:
            checked = check_settings(RunSpec(**kept), n or 1)
        except ValueError as error:  # this field's own refusal (the others are numbers)
            return gr.Number(info=field_info(name, n, str(error)))
        info = field_info(name, n, checked.notes.get(name))
        if name not in checked.notes or (name in ZERO_KEPT and values[FIELDS.index(name)] in (0, None)):
            # nothing corrected (0 stays 0, "= n"): the value is left alone, so a check that answers
            # late on a loaded server never puts back what the visitor has typed over since
            return gr.Number(info=info)
        return gr.Number(value=getattr(checked.spec, name), info=info)

    def _field_updates(self, checked, n: int | None, keep=()) -> dict:
        """Each field's checked value and its line (what was corrected, or the allowed range), by
        component; the fields in `keep` (0 = n) keep their value."""
        updates = {}
        for name in FIELDS:
            info = field_info(name, n, checked.notes.get(name))
            # 0 stays 0 ("= n"): an update without a value (gr.skip() as the value blanked the field)
            value = {} if name in keep else {"value": getattr(checked.spec, name)}
            updates[self.fields[name]] = gr.Number(info=info, **value)
        return updates

    def history(self, request: gr.Request):
        """This visitor's tries (`ui.history`): the notes, the table and its CSV."""
        frame = history_frame(self.session.races.runs(client_key(request)))
        if frame.empty:
            return "No finished race yet.", frame, None
        notes = history_notes(frame)
        path = os.path.join(self.session.downloads.folder(), "libraspec-tries.csv")
        frame.to_csv(path, index=False)
        text = f"{frame['try'].max()} finished race(s); measured speedups carry their timing noise (1 sd)."
        return text + ("\n\n" + "\n".join(f"- {note}" for note in notes) if notes else ""), frame, path

    def use_suggested_alpha(self, request: gr.Request, drafter: str | None = None):
        """Set alpha to the app's one recommendation for the chosen drafter at batch 1
        (`WhatIf.recommendation`: the fastest alpha replayed on this visitor's own races, with its
        interval). Before any What-if replay there is none: alpha stays, and the line says how to get
        one and what section 3.4's formula gives for the last race, and why that is no recommendation."""
        owner, n = client_key(request), self.session.n
        name = drafter or self.session.default_drafter
        recommended = self.whatif.recommendation(owner, name) if self.whatif is not None and name else None
        if recommended is not None:
            checked = check_settings(RunSpec(alpha=recommended.alpha, d_max=n), n)
            note = checked.notes.get("alpha")
            info = f"recommended: {recommended.words()}" + (f" ⚠ {note}" if note else "")
            return gr.Number(value=checked.spec.alpha, info=info)
        try:
            _, how = self.session.races.suggested_alpha(owner)
            formula = f" Section 3.4's formula gives {how}; it is no recommendation: on a CPU it over-drafts"
        except ValueError as error:
            formula = f" ({error})"
        return gr.Number(
            info=f"⚠ no recommendation yet for the {name or 'chosen'} drafter: replay a greedy race of yours on the "
            f"What-if tab, and alpha is then chosen from those replays.{formula}"
        )

    def race_live(self, request: gr.Request, *values):
        """Stream the race: columns at most 4 times a second, figures once a second, always the end.
        `values`: the form's, in `FORM`'s order."""
        yield from self._race_live_gpu(client_key(request), RaceForm.of(dict(zip(FORM, values))))

    def _race_live(self, owner, form: RaceForm):
        keep = [name for name in ZERO_KEPT if getattr(form.settings, name) in (0, None)]
        figures_at, offered = 0.0, False  # offered: the inspector's mode dropdown lists this run's modes
        try:
            self.session.select(form.model)
            for snap in self.session.races.stream(form.prompt, form.settings, owner, form.drafter, form.modes):
                fields = {} if snap.checked is None else self._field_updates(snap.checked, self.session.n, keep)
                if snap.run is None:
                    waiting = check_race_modes(form.modes) if snap.phase == "baseline" and not snap.final else ()
                    columns = {
                        column: column_html(m, None, None, None, "waiting for the AR baseline…")
                        for m, column in zip(RACEABLE, self.columns)
                        if m in waiting
                    }
                    yield (
                        {self.status: status_html(snap.status, form.prompt, progress=snap.progress)} | columns | fields
                    )
                    continue
                due = snap.final or time.monotonic() - figures_at >= FIGURE_INTERVAL_S
                figures = self.inspector.figures(snap.run, form.inspect_mode, snap.final, not offered) if due else {}
                if due and snap.final:
                    figures[self.run_id] = snap.run.run_id
                figures_at = time.monotonic() if due else figures_at
                offered = offered or due
                yield {self.status: self._status(snap)} | self._columns(snap.run) | figures | fields
        except (ValueError, OSError, ImportError) as error:  # ImportError: a pair's package is missing
            # not a gr.Error: that would mark every output, the previous run's results included, with an error
            yield {self.status: status_html(f"Not run: {error}", form.prompt, error=True)}

    def race(
        self,
        request: gr.Request,
        prompt: str,
        alpha: float = RunSpec.alpha,
        d_max: int = RunSpec.d_max,
        static_length: int = 0,
        temperature: float = RunSpec.temperature,
        max_new_tokens: int = RunSpec.max_new_tokens,
        seed: int = RunSpec.seed,
        model: str = "",
        drafter: str = "",
        modes: str = "",
        tree_depth: int = 0,
        node_budget: int = RunSpec.node_budget,
        libraspec_start: int = 0,
    ) -> tuple[str, str, str, dict]:
        """Race up to three modes on one prompt (static_length 0 = n; model "" = the app's current
        pair, else one of the pairs the app offers; drafter "" = the pair's default, else dflash,
        fastdllm, lookup or hybrid; modes: comma-separated names, "" = "static,libraspec,oracle", any of
        static, libraspec, g4, failfast, oracle, ddtree, ddtree-libraspec, ddtree-marginal,
        ddtree-priced; tree_depth 0 = n and node_budget: the tree modes' depth (ddtree) and nodes per
        tree, the cap of ddtree-marginal and ddtree-priced; libraspec_start: LibraSpec's first d,
        Algorithm 1 line 4, at most d_max, 0 = the drafter's n as the paper writes it).

        Returns three output texts, those of the raced modes in the registry's order (the columns'
        order; "" for a column left empty when fewer modes race), and a summary: the raced modes
        (race_modes), settings, notes on clamped values, the drafter, per mode tokens, rounds, tau,
        tokens/s, speedups over AR (measured, modeled), finish rank by measured time and the modes
        within timing noise of it, and a verdict on the winner.
        """
        values = (
            alpha,
            d_max,
            static_length,
            temperature,
            max_new_tokens,
            seed,
            tree_depth,
            node_budget,
            libraspec_start,
        )
        form = RaceForm.of(dict(zip(FIELDS, values), prompt=prompt, drafter=drafter, modes=modes, model=model))
        return self._race_gpu(client_key(request), form)

    def _race(self, owner, form: RaceForm):
        snap = None
        try:
            self.session.select(form.model)
            for snap in self.session.races.stream(form.prompt, form.settings, owner, form.drafter, form.modes):
                pass
        except (ValueError, OSError, ImportError) as error:  # ImportError: a pair's package is missing
            raise as_error(error) from error
        run = snap.run
        if run is None:  # superseded before the race began
            raise as_error(snap.status)
        texts = [run.text(mode) for mode in run.modes] + [""] * (RACE_COLUMNS - len(run.modes))
        return (*texts, run_report(run))

    def export_trace(self, request: gr.Request, run_id: str) -> list[str] | None:
        """CSV and Parquet files of a run's round records (AR baseline included), by the id of one
        of this client's runs."""
        if not run_id:
            return None
        try:
            return self.session.races.export(run_id, client_key(request))
        except ValueError as error:
            raise as_error(error) from error

    @staticmethod
    def show_columns(modes):
        """The chosen modes' columns shown, the others hidden (a choice the race refuses changes nothing)."""
        try:
            chosen = check_race_modes(modes or [])
        except ValueError:
            return [gr.skip()] * len(RACEABLE)
        return [gr.HTML(visible=mode in chosen) for mode in RACEABLE]

    # -- views --------------------------------------------------------------------------------

    def _status(self, snap: Snapshot) -> str:
        run = snap.run
        ar_s, _ = run.ar_per_token()
        details = f"{self.session.describe()} · drafter {run.drafter}" + (
            f" · AR baseline {1.0 / ar_s:.1f} tok/s" if ar_s else ""
        )
        message = snap.status
        if snap.final and verdict(run):
            message += " " + verdict(run)
        return status_html(message, run.prompt, run.notes, progress=snap.progress or details)

    def _columns(self, run: Run) -> dict:
        """Every column by component: the raced modes' shown and filled, the others hidden and emptied
        (so a column chosen later shows no text of an older race)."""
        return {
            column: gr.HTML(
                column_html(m, run.segments.get(m), run.summary(m), run.rank(m), tied_with=run.tied_with(m)),
                visible=True,
            )
            if m in run.modes
            else gr.HTML(column_html(m, None, None, None, "press Run race"), visible=False)
            for m, column in zip(RACEABLE, self.columns)
        }
