"""The one registry of decoding modes: AR, the hindsight oracle, every length policy and draft trees.

Every list of modes in the library, the CLI and the app comes from `MODES`. Adding a mode is
one `Mode` entry here plus its policy class (docs/ARCHITECTURE.md, "How to add a mode").
A mode's factory builds its policy from a checked `spec.RunSpec`, the one spec of every knob.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .group import Batch, GlobalBudget, GroupPolicy, LiveSchedule, PricedGroup
from .policy import FailFastPolicy, G4Policy, LengthPolicy, LibraSpecPolicy, StaticPolicy
from .priced import PricedLibraSpecPolicy
from .serving.sglang import SGLangAdaptivePolicy
from .serving.transformers_threshold import ConfidenceThresholdPolicy
from .serving.vllm import BatchSchedulePolicy, VLLMAdaptivePolicy, load_schedule
from .spec import RunSpec
from .tree_policy import MarginalTreePolicy, PricedTreePolicy, TreePolicy, node_reasons

ROLES = {
    "paper": "the paper's policy: the subject of reports, the step-through and the alpha advice",
    "baseline": "the fixed-length baseline: benchmarks run several lengths and compare with the best",
    "engine": "a rule a serving engine ships (libraspec/serving/): reports and the what-if set LibraSpec beside it",
}
ENGINE = "engine"


@dataclass(frozen=True)
class Mode:
    """A decoding mode: how to build its policy and how views show it."""

    name: str
    label: str  # shown in tables, legends and reports
    title: str  # the heading of its race column and its name in sentences
    colour: str  # Okabe-Ito palette: distinguishable under common colour-vision deficiencies
    kind: str  # "ar" (no drafts), "oracle" (hindsight d*), "policy" (a chain of length d) or "tree"
    factory: Callable[..., LengthPolicy] | None = None  # (settings) -> policy; (settings, profile) if priced
    priced: bool = False  # its policy prices its choices with the decoder's latency profile
    knobs: tuple[str, ...] = ()  # the RunSpec fields its policy reads
    role: str = ""  # what comparisons read it as (ROLES); "" for none
    beside: tuple[str, ...] = ()  # the modes reports set it beside: a tree mode, the tree or chain it extends
    published: tuple[tuple[str, float], ...] = ()  # its own paper's settings (RunSpec fields): label MODE-paper
    # its group form in lock-step (libraspec/group.py): (checked settings, the group's `Batch`: its
    # concurrency profiles, size B and batching) -> a `GroupPolicy` that chooses every request's d_b
    # at once; None: in lock-step each request chooses alone with `policy` (analysis.regimes.lockstep)
    group: Callable[[RunSpec, Batch], GroupPolicy] | None = None

    @property
    def published_label(self) -> str:
        """The bench label of this mode run with its paper's settings (`published`)."""
        return f"{self.name}-paper"

    @property
    def needs_drafter(self) -> bool:
        return self.kind != "ar"

    def policy(self, settings: RunSpec, profile=None) -> LengthPolicy | None:
        """A fresh policy, a tree mode's tree policy (None for AR and the oracle); settings must
        already be `checked`; a priced mode needs the `profile` its decoder prices rounds with."""
        if self.factory is None:
            return None
        if not self.priced:
            return self.factory(settings)
        if profile is None:
            raise ValueError(f"mode {self.name} prices its choices with a latency profile: pass the decoder's")
        return self.factory(settings, profile)

    def node_reasons(self, settings: RunSpec, profile, earlier, record) -> list[str] | None:
        """Why each node of `record`'s tree entered (`tree_policy.node_reasons`), for a mode whose tree
        policy rules node by node (ddtree-marginal, ddtree-priced: `MarginalTreePolicy`), its state
        brought to the round by the run's `earlier` rounds; None for every other mode."""
        if self.kind != "tree":
            return None
        policy = self.policy(settings, profile)
        return node_reasons(policy, earlier, record) if isinstance(policy, MarginalTreePolicy) else None


def _g4(s: RunSpec) -> G4Policy:
    if s.g4_initial is None:
        raise ValueError("G4's first length is unset: pass settings that RunSpec.checked returned")
    return G4Policy(s.g4_initial, s.d_max)


def _engine_rule(name: str, label: str, title: str, colour: str, factory, **more) -> Mode:
    """A serving engine's rule (libraspec/serving/): a chain policy whose one knob is d_max (its own
    parameters are its source's defaults)."""
    return Mode(name, label, title, colour, "policy", factory, knobs=("d_max",), role=ENGINE, **more)


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode("ar", "AR", "Autoregressive", "#7F7F7F", "ar"),
        Mode(
            "static",
            "static",
            "Static",
            "#0072B2",
            "policy",
            lambda s: StaticPolicy(s.static_length),
            knobs=("static_length",),
            role="baseline",
        ),
        Mode(
            "libraspec",
            "LibraSpec",
            "LibraSpec",
            "#D55E00",
            "policy",
            lambda s: LibraSpecPolicy(s.alpha, s.d_max, s.libraspec_start),
            knobs=("alpha", "d_max", "libraspec_start"),
            role="paper",
        ),
        Mode(
            "libraspec-priced",
            "LibraSpec priced",
            "LibraSpec priced",
            "#994F00",  # a darker vermillion than LibraSpec's: the same rule, alpha from the price list
            "policy",
            lambda s, profile: PricedLibraSpecPolicy(profile, s.d_max),
            priced=True,
            knobs=("d_max",),
            group=lambda s, batch: PricedGroup(batch, s.d_max),  # in lock-step: the group's round priced
        ),
        Mode("g4", "G4", "G4", "#CC79A7", "policy", _g4, knobs=("g4_initial", "d_max")),
        Mode(
            "failfast",
            "FailFast",
            "FailFast",
            "#E69F00",
            "policy",
            lambda s: FailFastPolicy(s.failfast_threshold, s.failfast_step, s.d_max),
            knobs=("failfast_threshold", "failfast_step", "d_max"),
            # the FailFast paper's: start at 10 drafts, extend by 10 while every q_i >= 0.45, at most 60
            published=(("failfast_threshold", 0.45), ("failfast_step", 10), ("d_max", 60)),
        ),
        # the engines' rules (libraspec/serving/): their own parameters are their sources' defaults
        # (colours: Paul Tol muted, rose, olive, green and sand)
        _engine_rule(
            "sglang-adaptive",
            "SGLang adaptive",
            "SGLang adaptive steps",
            "#CC6677",
            lambda s: SGLangAdaptivePolicy(s.d_max),
        ),
        _engine_rule(
            "hf-threshold",
            "transformers threshold",
            "transformers confidence threshold",
            "#999933",
            lambda s: ConfidenceThresholdPolicy(s.d_max),
        ),
        _engine_rule(  # vLLM PRs #47808 / #52228, adaptive_verification.py: the global draft budget, one request
            "vllm-adaptive",
            "vLLM adaptive",
            "vLLM adaptive verification",
            "#117733",
            lambda s, profile: VLLMAdaptivePolicy(profile, s.d_max),
            priced=True,
            group=lambda s, batch: GlobalBudget(batch, s.d_max),  # in lock-step: the budget over the group
        ),
        _engine_rule(  # vLLM PR #32374, num_speculative_tokens_per_batch_size: its table in assets/batch_schedule.json
            "vllm-schedule",
            "vLLM schedule",
            "vLLM batch-size schedule",
            "#DDCC77",
            lambda s: BatchSchedulePolicy(load_schedule(), 1, s.d_max),
            # in lock-step: K at the number of requests still running, for every request
            group=lambda s, batch: LiveSchedule(load_schedule()["ranges"], s.d_max),
        ),
        Mode("oracle", "oracle", "Oracle", "#009E73", "oracle"),
        Mode(
            "ddtree",
            "DDTree",
            "DDTree",
            "#56B4E9",
            "tree",
            lambda s: TreePolicy(StaticPolicy(s.tree_depth), s.node_budget),
            knobs=("tree_depth", "node_budget"),
            beside=("static",),
        ),
        Mode(
            "ddtree-libraspec",
            "DDTree+LibraSpec",
            "DDTree+LibraSpec",
            "#882255",
            "tree",
            lambda s: TreePolicy(LibraSpecPolicy(s.alpha, s.d_max), s.node_budget),
            knobs=("alpha", "d_max", "node_budget"),
            beside=("ddtree", "libraspec"),
        ),
        Mode(
            "ddtree-marginal",
            "DDTree+marginal nodes",
            "DDTree+marginal nodes",
            "#44AA99",
            "tree",
            lambda s: MarginalTreePolicy(s.alpha, s.d_max, s.node_budget),
            knobs=("alpha", "d_max", "node_budget"),
        ),
        Mode(
            "ddtree-priced",
            "DDTree+priced nodes",
            "DDTree+priced nodes",
            "#332288",
            "tree",
            lambda s, profile: PricedTreePolicy(profile, s.d_max, s.node_budget),
            priced=True,
            knobs=("d_max", "node_budget"),
        ),
    )
}
POLICY_MODES = tuple(name for name, m in MODES.items() if m.kind == "policy")
TREE_MODES = tuple(name for name, m in MODES.items() if m.kind == "tree")


def _only(names: list[str], what: str) -> str:
    if len(names) != 1:
        raise RuntimeError(f"the registry needs exactly one {what}, has {names}")
    return names[0]


AR = _only([name for name, m in MODES.items() if m.kind == "ar"], "AR mode")  # every speedup's reference
ORACLE = _only([name for name, m in MODES.items() if m.kind == "oracle"], "oracle")
PAPER = _only([name for name, m in MODES.items() if m.role == "paper"], ROLES["paper"])
BASELINE = _only([name for name, m in MODES.items() if m.role == "baseline"], ROLES["baseline"])


def get_mode(name: str) -> Mode:
    if name not in MODES:
        raise ValueError(f"unknown mode {name!r}; choose one of {', '.join(MODES)}")
    return MODES[name]


def make_policy(name: str, n: int, profile=None, **settings) -> LengthPolicy:
    """A policy mode's policy (a tree mode's tree policy) for a drafter with n drafts per step, from
    keyword settings (the fields of `RunSpec`, defaults for the rest), clamped by
    `RunSpec.checked`; a priced mode needs the decoder's latency `profile`."""
    mode = get_mode(name)
    if mode.factory is None:
        raise ValueError(
            f"mode {name!r} takes no policy; modes with one: "
            f"{', '.join(key for key, m in MODES.items() if m.factory is not None)}"
        )
    return mode.policy(RunSpec(**settings).checked(n).spec, profile)
