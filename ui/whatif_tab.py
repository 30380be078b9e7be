"""What-if tab: a greedy race re-planned for any alpha, d_max, static length and cost profile without
decoding again (layout and wiring only; `ui.whatif` records the trace and picks the profile,
`analysis.whatif.Planner` plans, `views.whatif_plots` draws).

Replay records once what the drafter proposes from every position of the race's text (seconds
to a minute on a CPU, with progress); after that every slider re-plans in milliseconds. Every
figure and table here is a modeled replay, never a measurement.
"""

from __future__ import annotations

import os
import time

import gradio as gr
import pandas as pd

from libraspec.analysis.whatif import DEFAULT_RULE, RULES, grid_axes
from libraspec.drafters import DRAFTER_TITLES, DRAFTERS
from libraspec.modes import MODES
from libraspec.spec import ALPHA_RANGE, RunSpec
from libraspec.views import whatif_plots

from .common import QUEUE, as_error, client_key
from .render import status_html
from .session import Session
from .whatif import BATCH_1, LOOKAHEAD, SYNTHETIC, WhatIf, profile_choices

EXPLAIN = (
    "**Modeled replay, not a measurement.** Greedy decoding's text is fixed (it equals AR's), so a "
    "race's rounds depend only on what the drafter proposes from each position. *Replay* records that "
    "once for the race you pick; then every setting re-plans in milliseconds: LibraSpec and static d "
    "with your alpha, d_max and static length, the oracle's d* round by round, and the **best schedule** "
    "in hindsight (the lengths that minimise the whole text's modeled time: the limit of any length "
    "policy with this drafter). *Modeled* means priced by the chosen latency profile; *measured* means "
    "timed on this machine (the profile's own numbers). Choose a profile to see where the length choice "
    "matters: at batch 1 on a CPU a verified token costs almost nothing; with several requests in "
    "lock-step, or a steep synthetic cost per token, it does."
)


PROFILE = 3  # the profile choice's place among the knobs (alpha, d_max, static, profile, t0, ...)


class WhatIfTab:
    """The "What if" tab inside an open `gr.Blocks`."""

    def __init__(self, session: Session, whatif: WhatIf | None = None):
        """`whatif`: the app's one `WhatIf` (the race tab's suggested alpha reads its recommendation)."""
        self.session = session
        self.whatif = whatif or WhatIf(session)

    def build(self) -> None:
        with gr.Tab("What if", id="whatif") as self.tab:
            gr.Markdown(EXPLAIN)
            with gr.Row():
                self.race = gr.Dropdown([], label="your greedy race", elem_id="ls-whatif-race", scale=3)
                self.drafter = gr.Dropdown(
                    [(DRAFTER_TITLES[d], d) for d in DRAFTERS],
                    value=self.session.default_drafter or DRAFTERS[0],
                    label="drafter",
                    elem_id="ls-whatif-drafter",
                )
                self.replay_button = gr.Button("Replay", variant="primary", elem_id="ls-whatif-replay")
            self.status = gr.HTML(
                status_html("Run a greedy race on the Race tab, then pick it here and press Replay."),
                elem_id="ls-whatif-status",
            )
            with gr.Row():
                self.alpha = gr.Slider(
                    ALPHA_RANGE[0],
                    32.0,
                    value=RunSpec.alpha,
                    step=0.05,
                    label="alpha",
                    elem_id="ls-whatif-alpha",
                )
                self.d_max = gr.Slider(1, LOOKAHEAD, value=24, step=1, label="d_max", elem_id="ls-whatif-dmax")
                self.static = gr.Slider(
                    0, LOOKAHEAD, value=0, step=1, label="static length (0 = n)", elem_id="ls-whatif-static"
                )
            with gr.Row():
                self.profile = gr.Dropdown(
                    profile_choices(), value=BATCH_1, label="latency profile", elem_id="ls-whatif-profile", scale=3
                )
                self.t0 = gr.Number(20.0, label="synthetic t0 (ms)", minimum=0.01, maximum=10_000)
                self.per_token = gr.Number(
                    2.0, label="synthetic cost per verified token (ms)", minimum=0, maximum=10_000
                )
                self.draft = gr.Number(5.0, label="synthetic drafting step (ms)", minimum=0, maximum=10_000)
                self.rule = gr.Dropdown(
                    [(MODES[mode].title, mode) for mode in RULES],
                    value=DEFAULT_RULE,
                    label="rule beside LibraSpec",
                    info="a serving engine's rule or another length policy, replayed on the same drafts",
                    elem_id="ls-whatif-rule",
                )
            self.lengths_plot = gr.Plot(None, label="d per round", show_label=False, elem_id="ls-whatif-lengths")
            self.table = gr.Dataframe(
                pd.DataFrame(), label="modeled speedups", interactive=False, elem_id="ls-whatif-table"
            )
            self.grid_plot = gr.Plot(None, label="alpha x d_max", show_label=False, elem_id="ls-whatif-grid")
            with gr.Row():
                self.export_button = gr.Button("Export the plan and the grid (CSV)", elem_id="ls-whatif-export")
                self.export_files = gr.File(
                    label="what-if CSV files", interactive=False, file_count="multiple", elem_id="ls-whatif-files"
                )
            self.key = gr.State(None)  # (run id, drafter) of the trace this page replays
            self.drawn = gr.State(None)  # the profile choice the figures show (a failed choice reverts to it)
            self._wire()

    def _wire(self) -> None:
        knobs = [self.alpha, self.d_max, self.static, self.profile, self.t0, self.per_token, self.draft, self.rule]
        outputs = [self.status, self.lengths_plot, self.table, self.grid_plot]
        self.tab.select(self.refresh, None, [self.race, self.drafter], queue=False, api_visibility="private")
        self.race.input(self.follow_race, [self.race], [self.drafter], queue=False, api_visibility="private")
        self.replay_button.click(
            self.record,
            [self.race, self.drafter] + knobs,
            outputs + [self.key, self.drawn],
            api_visibility="private",
            show_progress="minimal",
            **QUEUE,
        )
        self.export_button.click(
            self.export, [self.key] + knobs, [self.export_files], queue=False, api_visibility="private"
        )
        for knob in knobs:  # the visitor's own moves only: a choice sent back after a failure re-plans nothing
            knob.input(
                self.replan,
                [self.key, self.drawn] + knobs,
                outputs + [self.drawn, self.profile],
                api_visibility="private",
                show_progress="hidden",
                trigger_mode="always_last",
                queue=False,  # a re-plan is milliseconds of CPU and never takes the model: no queue round trip
            )

    def refresh(self, request: gr.Request):
        """Opening the tab: this visitor's greedy races, the newest chosen, and its drafter."""
        choices = self.whatif.races(client_key(request))
        first = choices[0][1] if choices else None
        return gr.Dropdown(choices=choices, value=first), self.follow_race(request, first)

    def follow_race(self, request: gr.Request, run_id):
        """The drafter of the chosen race (a what-if replays the race's own drafter unless changed)."""
        if not run_id:
            return gr.skip()
        try:
            drafter = self.session.races.get_run(run_id, client_key(request)).drafter
        except ValueError:
            return gr.skip()
        return gr.update(value=drafter) if drafter in DRAFTERS else gr.skip()

    def record(self, request: gr.Request, run_id, drafter, *knobs):
        """Record (or reuse) the trace of the chosen race, then plan with the current knobs."""
        if not run_id:
            raise as_error("No greedy race chosen: run one on the Race tab (temperature 0), then pick it here.")
        try:
            trace, recorded_now = None, False
            for item in self.whatif.trace(run_id, drafter, client_key(request)):
                if isinstance(item, str):
                    recorded_now = True
                    yield status_html(item), *([gr.skip()] * 5)
                else:
                    trace = item
            key = (run_id, drafter)
            note = self.whatif.measuring_note(knobs[PROFILE])
            if note:  # the measurement is minutes on a CPU: say so before it starts
                yield status_html(note, progress="measuring the lock-step profiles"), *([gr.skip()] * 5)
            recorded = trace.meta.get("seconds") if recorded_now else None
            planned = self._plan(
                trace,
                *knobs,
                recorded=recorded,
                kept=not recorded_now,
                measured=bool(note),
                owner=client_key(request),
                run_id=run_id,
            )
            yield *planned, key, knobs[PROFILE]
        except (ValueError, OSError) as error:
            raise as_error(error) from error

    def replan(self, request: gr.Request, key, drawn, *knobs):
        """Re-plan after a knob moved. What cannot be planned (a lock-step profile not measured yet, a
        synthetic t0 of 0) leaves the figures as they were and says so in the status, naming the profile
        they still show; a profile choice that failed reverts to that profile."""
        if key is None:
            return (gr.skip(),) * 6
        try:
            trace = self.whatif.kept(*key, client_key(request))
            if trace is None:  # no longer kept: recording again needs the model queue
                return status_html("The replay was dropped to make room: press Replay again."), *([gr.skip()] * 5)
            planned = self._plan(trace, *knobs, measure=False, owner=client_key(request), run_id=key[0])
            return *planned, knobs[PROFILE], gr.skip()
        except (ValueError, OSError) as error:
            still = f" The figures still show the replay under '{drawn}'." if drawn else ""
            reverted = drawn is not None and knobs[PROFILE] != drawn
            words = f"Not re-planned: {str(error).rstrip('.')}.{still}"
            words += f" The profile choice went back to '{drawn}'." if reverted else ""
            revert = gr.update(value=drawn) if reverted else gr.skip()
            return status_html(words, error=True), gr.skip(), gr.skip(), gr.skip(), gr.skip(), revert

    def export(self, request: gr.Request, key, *knobs) -> list[str]:
        """The plan shown (one row per line) and the alpha x d_max grid (one row per cell) as two CSV
        files, each row naming the profile, the drafter and the knobs it was planned with."""
        if key is None:
            raise as_error("Nothing to export yet: pick a greedy race and press Replay.")
        trace = self.whatif.kept(*key, client_key(request))
        if trace is None:
            raise as_error("The replay was dropped to make room: press Replay again.")
        try:
            plan, _, _, alphas, d_maxes, grid = self._planned(trace, *knobs, measure=False)
        except ValueError as error:
            raise as_error(error) from error
        best = plan.best.speedup(plan.ar_seconds)
        about = {"race": key[0], "drafter": trace.drafter, "profile": plan.profile, "modeled": True}
        knobs_used = {
            "alpha": plan.settings.alpha,
            "d_max": plan.settings.d_max,
            "static d": plan.settings.static_length,
        }
        rows = [about | knobs_used | row for row in plan.rows()]
        cells = [
            about
            | {
                "alpha": a,
                "d_max": d,
                "speedup vs AR (modeled)": grid[i, j],
                "share of best schedule": grid[i, j] / best,
            }
            | {"chosen": (a, d) == (plan.settings.alpha, plan.settings.d_max)}
            for i, a in enumerate(alphas)
            for j, d in enumerate(d_maxes)
        ]
        folder = self.session.downloads.folder()
        paths = [os.path.join(folder, "libraspec-whatif-plan.csv"), os.path.join(folder, "libraspec-whatif-grid.csv")]
        pd.DataFrame(rows).to_csv(paths[0], index=False)
        pd.DataFrame(cells).to_csv(paths[1], index=False)
        return paths

    def _planned(self, trace, alpha, d_max, static, profile_choice, t0, per_token, draft, rule, measure=True):
        """(plan, its profile, (wall, CPU) seconds the profile choice took, grid alphas, grid d_maxes, grid): what the
        tab draws and exports for a trace and the knobs. `measure`: whether a lock-step profile not
        measured yet may be measured now (Replay, queued) or is refused (a slider's re-plan)."""
        start, cpu = time.perf_counter(), time.thread_time()
        costs = (float(t0 or 0), float(per_token or 0), float(draft or 0))
        profile = self.whatif.profile(profile_choice, *costs, measure=measure)
        profile_s = (time.perf_counter() - start, time.thread_time() - cpu)
        planner = self.whatif.planner(trace, profile)
        plan = planner.plan(RunSpec(alpha=float(alpha), d_max=int(d_max), static_length=int(static)), rule or None)
        alphas, d_maxes = grid_axes(trace, plan.settings)
        return plan, profile, profile_s, alphas, d_maxes, planner.grid(alphas, d_maxes)

    def _start_note(self, run_id, owner) -> str:
        """A race that started LibraSpec elsewhere than n (its LibraSpec start) is re-planned from n:
        What-if has no start knob, so the status says so."""
        try:
            start = self.session.races.get_run(run_id, owner).settings.libraspec_start if run_id else None
        except ValueError:
            return ""
        if start is None:
            return ""
        return (
            f" The race started LibraSpec at d = {start} (its LibraSpec start); these plans start it at the "
            "drafter's n, as Algorithm 1 is written: What-if has no start knob."
        )

    def _plan(self, trace, *knobs, recorded=None, measure=True, kept=False, measured=False, owner=None, run_id=None):
        """Plan and draw. A slider's re-plan (unqueued: it must not wait behind a race) never takes
        the model for a measurement (`measure` False); Replay, queued, may (`measured`: it announced one),
        and that measurement is timed apart from the re-plan. `recorded`: the seconds the trace took when
        recorded now; `kept`: the trace was recorded by an earlier Replay."""
        start, cpu = time.perf_counter(), time.thread_time()
        plan, profile, profile_s, alphas, d_maxes, grid = self._planned(trace, *knobs, measure=measure)
        start, cpu = start + profile_s[0], cpu + profile_s[1]  # the re-plan's own time: a measurement apart
        profile_choice = knobs[PROFILE]
        table = pd.DataFrame(plan.rows()).round(3)
        lengths = whatif_plots.lengths_figure(plan)
        chosen = (plan.settings.alpha, plan.settings.d_max)
        grid_fig = whatif_plots.grid_figure(
            grid, alphas, d_maxes, plan.best.speedup(plan.ar_seconds), plan.profile, chosen
        )
        elapsed, cpu = (time.perf_counter() - start) * 1e3, (time.thread_time() - cpu) * 1e3
        words = (
            f"Modeled replay of {len(trace.output)} tokens drafted by {trace.drafter} under {plan.profile}; "
            f"re-planned in {elapsed:.0f} ms ({cpu:.0f} ms of CPU; the rest is waiting for the machine)."
        )
        if measured:  # a lock-step profile measured for this Replay (once per machine)
            words = f"Measured the lock-step profiles in {profile_s[0]:.0f} s (once per machine and pair). " + words
        if recorded is not None:
            words = f"Recorded the drafter's proposals in {recorded:.1f} s. " + words
        elif kept:
            words = "Replayed the drafter's proposals recorded by an earlier Replay. " + words
        if plan.notes:
            words += " Clamped: " + "; ".join(plan.notes) + "."
        if profile_choice == SYNTHETIC:
            words += " The synthetic profile is made up from the three numbers beside it."
        words += self._start_note(run_id, owner)
        recommended = self.whatif.recommendation(owner, trace.drafter, profile) if owner else None
        if recommended is not None:  # the one recommendation the app makes, for this drafter and regime
            words += f" Recommended: {recommended.words()}."
        return status_html(words), lengths, table, grid_fig
