"""The step-through's content, for the Algorithm step-through tab (`teach_tab`, which lays out and
wires): which confidences q_i (a LibraSpec round of the visitor's own last race, replayed with
that race's alpha, n and d_max; a synthetic profile; a pasted list), which cost model, the
states of Algorithm 1 (`libraspec.analysis.stepper`, the same decisions as `LibraSpecPolicy`),
their text, and the expected speedup E[eta_d] (Eq. 1, `libraspec.analysis.theory`). No model work.
Paper symbols: alpha, n, d, d_max, B, eps_i, q_i, tau.
"""

from __future__ import annotations

import dataclasses
import html

import numpy as np

from libraspec.analysis.stepper import algorithm_states, parse_confidences, synthetic_confidences
from libraspec.analysis.theory import auto_alpha, exhaustive_argmax, expected_tau_curve
from libraspec.cost import BLOCK_DIFFUSION, Drafting, LatencyProfile
from libraspec.drafters import SOURCE_TITLES, round_drafting
from libraspec.modes import PAPER
from libraspec.records import RoundRecord
from libraspec.spec import RunSpec
from libraspec.views import tuning_plots

from .run import Run
from .settings import APP_CAPS, FLAT_C_S, check_settings

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
    alpha: float = RunSpec.alpha
    n: int = 8
    d_max: int = RunSpec.d_max
    cost: str = "measured profile"  # this machine's, once loaded; the linear cost is a teaching toy
    t0_ms: float = 20.0
    c_ms: float = 1.0
    draft_ms: float = 5.0


@dataclasses.dataclass(frozen=True)
class Confidences:
    """What a step-through runs on: the known q_i, n, d_max, alpha, notes, and the race round replayed."""

    q: np.ndarray  # (known,) q_1.. of the positions drafted or given
    n: int
    d_max: int
    alpha: float
    notes: tuple[str, ...]
    record: RoundRecord | None = None  # the race round replayed (source "last race round")
    drafter: str | None = None  # the drafter of that race

    @property
    def padded(self) -> np.ndarray:
        """q with zeros up to d_max: positions a replayed round never drafted, which the policy never reads."""
        return np.pad(self.q, (0, max(0, self.d_max - self.q.size)))

    @property
    def horizon(self) -> int:
        """The longest d whose q_1..q_d are all known (the expected-speedup curve stops there)."""
        return min(self.d_max, int(self.q.size))


def check_start(run: Run) -> None:
    """Refuse a race whose LibraSpec started elsewhere than the drafter's n: the step-through walks
    Algorithm 1 as the paper writes it, from d = n, and would not replay that race's rounds."""
    start = run.settings.libraspec_start
    if start is not None and start != run.n:
        raise ValueError(
            f"the last race started LibraSpec at d = {start} (its LibraSpec start), and the step-through walks "
            f"Algorithm 1 as written, from d = n = {run.n}: race again with LibraSpec start 0 to step through it"
        )


def _race_round_record(inputs: Inputs, runs: list[Run] | None) -> tuple[Run, RoundRecord]:
    """The visitor's last race and its LibraSpec round `inputs.round_index` (the next one that ran)."""
    runs = [r for r in runs or [] if r.records.get(PAPER)]
    if not runs:
        raise ValueError("no race yet: run one on the Race tab, or pick synthetic / pasted confidences")
    run, records = runs[-1], runs[-1].records[PAPER]
    check_start(run)
    wanted = min(max(int(inputs.round_index), 0), records[-1].round_index)
    record = next(r for r in records if r.round_index >= wanted)
    if record.chosen_length == 0 and not record.policy_steps and not any(record.confidences):
        drafted = [r.round_index for r in records if any(r.confidences)]
        raise ValueError(
            f"LibraSpec round {record.round_index} of the last race was an AR step: the drafter had "
            "nothing to offer, so Algorithm 1 did not run. Rounds with drafts: "
            f"{', '.join(map(str, drafted[:20]))}{' …' if len(drafted) > 20 else ''}"
        )
    return run, record


def race_round_settings(inputs: Inputs, runs: list[Run] | None) -> tuple[float, int, int]:
    """(alpha, n, d_max) the race ran the chosen round with: what the sliders take when a race round
    is chosen, so that the step-through starts as the race decided and shows what it uses."""
    return _settings_of(*_race_round_record(inputs, runs))


def _settings_of(run: Run, record: RoundRecord) -> tuple[float, int, int]:
    alpha = record.alpha if record.alpha is not None else run.settings.alpha
    return float(alpha), int(run.n), int(run.settings.d_max)


def _knobs(inputs: Inputs, n: int, known: int | None = None) -> tuple[float, int, list[str]]:
    """The sliders' alpha and d_max as any run checks them (`RunSpec.checked` under the app's caps:
    d_max at least n, where Algorithm 1 starts, and at most the `known` confidences when given),
    and a note per change. n beyond the largest d_max allowed is refused: no d_max could hold it."""
    if not 1 <= n <= APP_CAPS.length:
        raise ValueError(
            f"n must be within 1..{APP_CAPS.length}, got {n}: Algorithm 1 starts at d = n, and d_max is at "
            f"most {APP_CAPS.length}"
        )
    caps = APP_CAPS
    if known is not None and known < APP_CAPS.length:
        caps = dataclasses.replace(APP_CAPS, length=known, why=f"only {known} confidences are known")
    checked = RunSpec(alpha=inputs.alpha, d_max=inputs.d_max).checked(n, caps=caps)
    notes = [f"Corrected: {checked.notes[name]}." for name in ("alpha", "d_max") if name in checked.notes]
    return checked.spec.alpha, checked.spec.d_max, notes


def _one_line(prompt: str, limit: int = 60) -> str:
    """A prompt quoted inside a sentence: one line, cut at `limit` characters, with no character that
    Markdown would read as structure (a pasted numbered list stays text)."""
    flat = " ".join(prompt.split())
    flat = flat if len(flat) <= limit else flat[: limit - 1] + "…"
    return "".join("\\" + c if c in "\\`*_[]#|~" else c for c in flat)  # < > & are escaped as HTML later


def _race_round(inputs: Inputs, runs: list[Run] | None) -> Confidences:
    """A LibraSpec round of the visitor's last race: its recorded confidences and the race's n (the
    blocks it drafted), with the sliders' alpha and d_max, which take the race's own values when the
    round is chosen (`race_round_settings`), so the replay starts from the same first block and
    takes the same decisions (Algorithm 1 line 3) until a slider is moved (`replay_check` says so)."""
    run, record = _race_round_record(inputs, runs)
    recorded_alpha, n, recorded_d_max = _settings_of(run, record)
    alpha, d_max, corrected = _knobs(inputs, n)
    same = alpha == recorded_alpha and d_max == recorded_d_max
    notes = (
        f'Replay of LibraSpec round {record.round_index} of the last race ("{_one_line(run.prompt)}"), recorded with '
        f"alpha = {recorded_alpha:g}, n = {n} and d_max = {recorded_d_max}"
        + ("" if same else f"; replayed with the sliders' alpha = {alpha:g} and d_max = {d_max}")
        + f": the race drafted {record.blocks_drafted} block(s) and chose d = {record.chosen_length} after "
        f"{len(record.policy_steps)} iteration(s). Positions past the {len(record.confidences)} drafted have "
        "no q_i (drawn as 0); n is the race's.",
        *corrected,
    )
    return Confidences(np.asarray(record.confidences, dtype=np.float64), n, d_max, alpha, notes, record, run.drafter)


def confidences_for(inputs: Inputs, runs: list[Run] | None) -> Confidences:
    """The confidences, n, d_max and alpha for the chosen source (`runs`: the client's races, oldest
    first). A race round keeps its race's settings; pasted confidences lower d_max to their count."""
    if inputs.source == "last race round":
        return _race_round(inputs, runs)
    n = int(inputs.n)
    if inputs.source == "pasted list":
        q = parse_confidences(inputs.pasted)
        if q.size < n:
            raise ValueError(f"need at least one block of n = {n} confidences, got {q.size}")
        alpha, d_max, notes = _knobs(inputs, n, known=int(q.size))
    elif inputs.source == "synthetic":
        alpha, d_max, notes = _knobs(inputs, n)
        q = synthetic_confidences(
            -(-d_max // n) * n, float(inputs.start), float(inputs.decay), float(inputs.noise), int(inputs.seed)
        )
    else:
        raise ValueError(f"unknown confidence source {inputs.source!r}")
    return Confidences(q, n, d_max, alpha, tuple(notes))


def replay_check(source: Confidences, states: list) -> str | None:
    """For a replayed race round: a warning when the step-through's decision differs from the record."""
    record = source.record
    if record is None:
        return None
    steps = tuple(s.step for s in states[1:])
    if steps != record.policy_steps or states[-1].blocks != record.blocks_drafted:
        return (
            f"⚠ This replay differs from the recorded round: the race recorded {len(record.policy_steps)} "
            f"iteration(s) and {record.blocks_drafted} block(s), the replay {len(steps)} and {states[-1].blocks}."
        )
    if states[-1].d != record.chosen_length:
        return (
            f"The race submitted d = {record.chosen_length}, not {states[-1].d}: max new tokens left room for "
            f"only {record.chosen_length} more draft(s) in that round."
        )
    return None


def cost_profile(inputs: Inputs, n: int, d_max: int, measured: LatencyProfile | None) -> tuple[LatencyProfile, str]:
    """The latency profile for E[eta_d]: the loaded pair's measured one (the default), or t0 + c*k,
    which also stands in, saying so, until a model is loaded."""
    fallback = ""
    if inputs.cost == "measured profile" and measured is None:
        fallback = " (the model is not loaded yet, so there is no measured profile: the linear cost stands in)"
    elif inputs.cost == "measured profile":
        t0, c = measured.linear_fit()
        note = (
            f"measured profile of {measured.meta.get('pair', 'the loaded pair')}: fit t0 = {1000 * t0:.2f} ms, "
            f"c = {1000 * c:.3f} ms/token"
        )
        if measured.n != n:
            note += f" (its drafting times are per block of n = {measured.n}, applied to n = {n})"
        return dataclasses.replace(measured, n=n), note
    for name, value in (("t0", inputs.t0_ms), ("c", inputs.c_ms), ("drafting per block", inputs.draft_ms)):
        if value is None or not np.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0 ms")
    if inputs.t0_ms + inputs.c_ms <= 0:
        raise ValueError("t0 + c must be > 0: a verification cannot be free")
    profile = LatencyProfile.from_linear(
        inputs.t0_ms / 1000, inputs.c_ms / 1000, max(inputs.draft_ms, 1e-6) / 1000, n, max(2, d_max + 1)
    )
    return profile, (
        f"linear cost: verify t0 + c*k = {inputs.t0_ms:g} + {inputs.c_ms:g} k ms, "
        f"drafting {inputs.draft_ms:g} ms per block{fallback}"
    )


def step_view(inputs: Inputs, index: int, runs: list[Run] | None = None, measured: LatencyProfile | None = None):
    """(clamped index, step figure, expected-speedup figure, markdown) for one state; `runs` and
    `measured` (the loaded pair's latency profile) serve the last-race source and the measured cost."""
    source = confidences_for(inputs, runs)
    q, n, d_max, horizon = source.q, source.n, source.d_max, source.horizon
    states = algorithm_states(source.padded, n, source.alpha, d_max)
    index = min(max(int(index), 0), len(states) - 1)
    profile, cost_note = cost_profile(inputs, n, d_max, measured)
    drafting = drafting_of(source, inputs, measured)
    if drafting != BLOCK_DIFFUSION:
        steps = " then ".join(dict.fromkeys(SOURCE_TITLES[s] for s in drafting.kept))
        cost_note += f"; drafting priced as the replayed round drafted: {steps} steps"
        dropped = ", ".join(SOURCE_TITLES[source] for _, source in drafting.discarded)
        cost_note += f", the proposals it did not keep ({dropped})" if dropped else ""
        cost_note += ", the upkeep" if drafting.needs_features else ", no upkeep"
    if drafting.passes > 1:
        cost_note += f"; every block priced at its most passes, {drafting.passes} (iterative unmasking)"
    final = states[-1].d
    best = exhaustive_argmax(q[:horizon], profile, horizon, drafting)
    head = f"**Step {index} of {len(states) - 1}.**" if len(states) > 1 else "**The only state: the loop never runs.**"
    lines = [f"{head} {html.escape(states[index].message)}", ""]
    if len(states) == 1 and inputs.source == "pasted list":  # pasted confidences set d_max to their count
        lines += [f"Paste more than n = {n} confidences to let d grow beyond the first block.", ""]
    lines += [f"{k}. {html.escape(s.message)}" for k, s in enumerate(states[1:index], start=1)] if index > 1 else []
    lines += [
        "",
        f"Run to the end, LibraSpec submits d = {final}; the exhaustive argmax of E[eta_d] over "
        f"1..{horizon} is d = {best} ({cost_note}).",
    ]
    suggestion = suggested_alpha(q, final, profile)
    if suggestion is not None:
        lines.append(
            f"Section 3.4: these costs and E[tau] = {suggestion[1]:.2f} at d = {final} suggest alpha = "
            f"T_verify / (tau c) = {suggestion[0]:.2f} (this step-through uses {source.alpha:g}): the formula for "
            f"this one round, to study it; the app's recommended alpha comes from replays of your races (What-if)."
        )
    check = replay_check(source, states)
    # notes in <em>, not _..._: a note's own underscores (d_max) or line breaks must not end the emphasis
    lines += [f"<em>{html.escape(note)}</em>" for note in source.notes] + ([html.escape(check)] if check else [])
    return (
        index,
        tuning_plots.stepper_figure(states, index, q, d_max, source.alpha),
        tuning_plots.expected_speedup_figure(q[:horizon], profile, horizon, final, n, drafting),
        "\n".join(lines),
    )


def refused_view(error: str) -> tuple:
    """What `step_view` shows for inputs it refuses (pasted confidences that are no list of numbers
    within [0, 1], too few of them): the message in the text and both figures emptied, so no earlier
    round stays on screen beside it."""
    blank = "nothing to show: see the message above the figures"
    return (
        0,
        tuning_plots.message_figure("stepper", "eps_i bounds", blank),
        tuning_plots.message_figure("expected", "Expected speedup E[eta_d]", blank),
        f"**⚠ Not shown:** {html.escape(error)}",
    )


def drafting_of(source: Confidences, inputs: Inputs, measured: LatencyProfile | None) -> Drafting:
    """How E[eta_d] prices a round's drafting: under the measured profile, which times every
    drafter, as the replayed race's drafter drafted that round (look-up steps without upkeep; a
    hybrid round's kept sources, the proposals it did not keep and the upkeep); block-diffusion
    passes otherwise (the linear cost's "drafting per block")."""
    if inputs.cost != "measured profile" or measured is None or source.record is None or source.drafter is None:
        return BLOCK_DIFFUSION
    return round_drafting(source.drafter, source.record.draft_sources[:: source.n], source.n)


def suggested_alpha(q: np.ndarray, d: int, profile: LatencyProfile) -> tuple[float, float] | None:
    """(alpha, E[tau]) that section 3.4 suggests for confidences q at length d; None when the
    profile's cost does not grow with d (c <= FLAT_C_S, as for the race's suggestion)."""
    _, c = profile.linear_fit()
    if c <= FLAT_C_S:
        return None
    tau = float(expected_tau_curve(q, d)[-1])
    return auto_alpha(profile, tau, d), tau


def suggested_slider_alpha(inputs: Inputs, runs: list[Run] | None, measured: LatencyProfile | None) -> float:
    """The alpha section 3.4 suggests for what the step-through shows (its q_i at the d Algorithm 1
    ends at, under its cost model), kept in the slider's range by the one clamp; ValueError when the
    cost model's verification does not grow with d (no finite alpha) or the inputs are unusable."""
    source = confidences_for(inputs, runs)
    profile, _ = cost_profile(inputs, source.n, source.d_max, measured)
    final = algorithm_states(source.padded, source.n, source.alpha, source.d_max)[-1].d
    suggestion = suggested_alpha(source.q, final, profile)
    if suggestion is None:
        raise ValueError("this cost model's verification cost does not grow with d (c <= 0): no finite alpha")
    return check_settings(RunSpec(alpha=suggestion[0]), source.n).spec.alpha


def pasted_states(confidences: str, n, alpha, d_max) -> list[dict]:
    """Algorithm 1 over pasted confidences (the `/algorithm_steps` API), alpha and d_max checked as
    the sliders are: every state as a dict (index, d, B, blocks, eps_i, eps*, reason, message)."""
    inputs = Inputs(source="pasted list", pasted=confidences, n=int(n), alpha=alpha, d_max=d_max)
    source = confidences_for(inputs, None)
    states = algorithm_states(source.q, source.n, source.alpha, source.d_max)
    keys = ("index", "d", "budget", "blocks", "eps_star", "reason", "message")
    return [{**{key: getattr(s, key) for key in keys}, "eps": list(s.eps)} for s in states]
