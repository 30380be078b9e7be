"""What if: a greedy text's rounds re-planned for other settings and profiles, without decoding.

`Planner.plan` replays LibraSpec, the static length and one more chain rule of the registry (`RULES`:
G4, FailFast, the serving engines' rules, LibraSpec priced) from one `DraftTrace` under a latency
profile and sets them beside the best schedule in hindsight (`replay.best_schedule`, the limit
of any chain length policy with this drafter and profile), the per-round oracle and AR;
`Planner.grid` gives LibraSpec's modeled speedup over an alpha x d_max grid. Every number is
modeled (a replay prices rounds with the profile, nothing is timed) and says which profile it
came from (`regimes.describe`). The per-round oracle d* of the records (what the MAD of chosen
lengths is measured against) looks at one round at a time; the best schedule plans the whole
text, so it is at least as fast.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from ..cost import LatencyProfile, ar_text_s
from ..modes import BASELINE, ENGINE, MODES, ORACLE, PAPER, POLICY_MODES
from ..records import RoundRecord
from ..spec import LIBRARY_CAPS, RunSpec
from .regimes import describe
from .replay import Schedule, best_schedule, replay
from .trace import DraftTrace

RULES = tuple(mode for mode in POLICY_MODES if mode not in (BASELINE, PAPER))  # the what-if's third line
DEFAULT_RULE = next((mode for mode in RULES if MODES[mode].role == ENGINE), RULES[0])  # a serving engine's first


@dataclass(frozen=True)
class Line:
    """One way through the text: d of each round and where each round started."""

    label: str
    lengths: tuple[int, ...]
    starts: tuple[int, ...]  # output position at the round's start
    seconds: float  # modeled
    tau: float  # tokens committed per round

    def speedup(self, ar_seconds: float) -> float:
        return ar_seconds / self.seconds


@dataclass(frozen=True)
class Plan:
    profile: str  # `regimes.describe` of the profile every number came from
    settings: RunSpec
    ar_seconds: float
    libraspec: Line
    static: Line
    best: Line
    oracle: Line  # the per-round d* of each round, followed round by round
    plan_ms: float  # how long planning took
    notes: tuple[str, ...] = ()  # what `clamp_to_trace` changed of the settings asked for
    rule: Line | None = None  # the chosen rule of `RULES`, replayed with the same settings
    rule_mode: str | None = None  # its mode name

    @property
    def lines(self) -> tuple[Line, ...]:
        rule = (self.rule,) if self.rule is not None else ()
        return (self.libraspec, self.static, *rule, self.oracle, self.best)

    def rows(self) -> list[dict]:
        """One row per line: modeled seconds, speedup over AR, share of the best schedule's speed."""
        return [
            {
                "way": line.label,
                "rounds": len(line.lengths),
                "mean d": float(np.mean(line.lengths)) if line.lengths else 0.0,
                "tau": line.tau,
                "modeled s": line.seconds,
                "speedup vs AR (modeled)": line.speedup(self.ar_seconds),
                "share of best schedule": self.best.seconds / line.seconds,
            }
            for line in self.lines
        ]


def _line(label: str, records: list[RoundRecord], prompt_len: int) -> Line:
    tokens = sum(len(r.committed_tokens) for r in records)
    return Line(
        label,
        tuple(r.chosen_length for r in records),
        tuple(r.start_position - prompt_len for r in records),
        records[-1].cumulative_modeled_s,
        tokens / len(records),
    )


def _schedule_line(schedule: Schedule, trace: DraftTrace) -> Line:
    return Line(
        "best schedule (hindsight)",
        schedule.lengths,
        schedule.starts,
        schedule.seconds,
        len(trace.output) / len(schedule.lengths),
    )


class Planner:
    """What-ifs over one trace and one latency profile: the parts that do not depend on alpha, d_max
    or the static length (the best schedule, the per-round oracle, the grid) are computed once."""

    def __init__(self, trace: DraftTrace, profile: LatencyProfile):
        self.trace, self.profile = trace, profile
        self.description = describe(profile)
        self.ar_seconds = ar_text_s(profile, len(trace.prompt), len(trace.output))
        self._best: Line | None = None
        self._oracle: Line | None = None
        self._grids: dict[tuple, float] = {}  # (alpha, d_max, base) -> LibraSpec's modeled speedup
        self._rules: dict[tuple, Line] = {}

    @property
    def best(self) -> Line:
        if self._best is None:
            self._best = _schedule_line(best_schedule(self.trace, self.profile), self.trace)
        return self._best

    @property
    def oracle(self) -> Line:
        if self._oracle is None:
            records = replay(self.trace, ORACLE, self.profile, lookahead=self.trace.lookahead)
            self._oracle = _line("oracle d* per round", records, len(self.trace.prompt))
        return self._oracle

    def plan(self, settings: RunSpec, rule: str | None = None) -> Plan:
        """LibraSpec, static d and `rule` (one of `RULES`, or None) with `settings` (`clamp_to_trace`)
        beside the oracle and the best schedule; a priced rule prices its choices with this profile."""
        if rule is not None and rule not in RULES:
            raise ValueError(f"unknown rule {rule!r}; choose one of {', '.join(RULES)}")
        start = time.perf_counter()
        trace, (settings, notes) = self.trace, clamp_to_trace(settings, self.trace)
        P = len(trace.prompt)
        libraspec = _line(MODES[PAPER].label, replay(trace, PAPER, self.profile, settings), P)
        static = _line(f"static d = {settings.static_length}", replay(trace, BASELINE, self.profile, settings), P)
        ruled = self._rule(rule, settings) if rule else None
        best, oracle = self.best, self.oracle
        return Plan(
            self.description,
            settings,
            self.ar_seconds,
            libraspec,
            static,
            best,
            oracle,
            (time.perf_counter() - start) * 1e3,
            tuple(notes),
            ruled,
            rule,
        )

    def _rule(self, rule: str, settings: RunSpec) -> Line:
        """The rule's line, replayed once per value of the knobs it reads (`Mode.knobs`): moving alpha
        or the static length does not replay a rule that reads neither."""
        key = (rule,) + tuple(getattr(settings, knob) for knob in MODES[rule].knobs)
        if key not in self._rules:
            records = replay(self.trace, rule, self.profile, settings)
            self._rules[key] = _line(MODES[rule].label, records, len(self.trace.prompt))
        return self._rules[key]

    def grid(self, alphas, d_maxes, base: RunSpec = RunSpec()) -> np.ndarray:
        """LibraSpec's modeled speedup over AR for each (alpha, d_max): (len(alphas), len(d_maxes))."""
        out = np.zeros((len(alphas), len(d_maxes)))
        for i, alpha in enumerate(alphas):
            for j, d_max in enumerate(d_maxes):  # each cell replayed once per planner (a slider adds one row)
                key = (float(alpha), int(d_max), base)
                if key not in self._grids:
                    settings, _ = clamp_to_trace(dataclasses.replace(base, alpha=alpha, d_max=d_max), self.trace)
                    seconds = replay(self.trace, PAPER, self.profile, settings)[-1].cumulative_modeled_s
                    self._grids[key] = self.ar_seconds / seconds
                out[i, j] = self._grids[key]
        return out


GRID_ALPHAS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)  # the what-if's heat map, around the paper's 2.2
GRID_D_MAXES = (8, 16, 24, 32, 48)


def grid_axes(trace: DraftTrace, chosen: RunSpec | None = None) -> tuple[tuple[float, ...], list[int]]:
    """The heat map's alphas and the d_max values this trace can replay (n up to its look-ahead), with a
    row for the chosen alpha and a column for the chosen d_max (`chosen`: the plan's checked settings)
    where the fixed axes lack them, so the cell the sliders chose is always on the map."""
    alphas = set(GRID_ALPHAS) | ({float(chosen.alpha)} if chosen is not None else set())
    d_maxes = {d for d in GRID_D_MAXES if trace.n <= d <= trace.lookahead}
    if chosen is not None and trace.n <= chosen.d_max <= trace.lookahead:
        d_maxes.add(int(chosen.d_max))
    return tuple(sorted(alphas)), sorted(d_maxes)


def plan(trace: DraftTrace, profile: LatencyProfile, settings: RunSpec, rule: str | None = None) -> Plan:
    """`Planner(trace, profile).plan(settings, rule)`: one what-if."""
    return Planner(trace, profile).plan(settings, rule)


def clamp_to_trace(settings: RunSpec, trace: DraftTrace) -> tuple[RunSpec, list[str]]:
    """Settings a trace can replay, and a note per change of a knob the what-if reads (the paper's
    and the baseline's modes'): `RunSpec.checked` with every length capped at the drafts the trace
    recorded a position (its look-ahead, which the note of a length lowered to it names), so a
    field is clamped once, with one note; the knobs it does not read keep the library's check,
    made from the capped values (G4's first length is resolved within the capped d_max)."""
    caps = LIBRARY_CAPS
    if trace.lookahead < LIBRARY_CAPS.length:
        why = f"the trace holds {trace.lookahead} drafts a position"
        caps = dataclasses.replace(LIBRARY_CAPS, length=trace.lookahead, why=why)
    traced = settings.checked(trace.n, context=trace.max_positions, caps=caps)
    knobs = MODES[PAPER].knobs + MODES[BASELINE].knobs + tuple(k for rule in RULES for k in MODES[rule].knobs)
    read = [f.name for f in dataclasses.fields(RunSpec) if f.name in knobs]
    merged = dataclasses.replace(settings, **{name: getattr(traced.spec, name) for name in read})
    spec = merged.checked(trace.n, context=trace.max_positions).spec
    return spec, [traced.notes[name] for name in read if name in traced.notes]
