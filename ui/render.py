"""HTML for the race columns: every token tinted by its origin, and the status line.

Reads round records only (tau = accepted drafts + 1 bonus / correction token per round;
`RoundRecord.draft_sources` says which drafter proposed each draft). Accepted drafts get a
background tint by origin, block diffusion or look-up (look-up also underlined, so the two
differ without colour); the target's own tokens stay plain, so a weak drafter's text is not
a wall of markup. Tints are inline and unpadded, so a word or number whose tokens come from
different origins or rounds reads as one word, and newlines are written as text between
the spans (the column keeps white space). Every piece of user or model text passes through
`html.escape`; styles are inline so the HTML renders the same in the app, in exported pages
and in tests.
"""

from __future__ import annotations

import html
import math

from libraspec.drafters import SOURCE_COLOURS, SOURCE_TITLES
from libraspec.modes import MODES
from libraspec.records import RoundRecord, RunSummary
from libraspec.views.plots import mode_color

ORDINALS = {1: "1st", 2: "2nd", 3: "3rd"}
# a column's text scrolls beyond this, so the columns fit one screen with the notes above them (they
# wrap, never cut: two lines of them leave the columns in view at 1440 x 900)
TEXT_HEIGHT = "max(10em, calc(100vh - 690px))"


def _tint(colour: str, opacity: float, shade: float = 1.0) -> str:
    """'#56B4E9', 0.3 -> 'rgba(86,180,233,0.3)'; `shade` < 1 darkens (an underline's contrast)."""
    red, green, blue = (round(int(colour[k : k + 2], 16) * shade) for k in (1, 3, 5))
    return f"rgba({red},{green},{blue},{opacity:g})"


# token origin -> (label, inline style); "draft" is a draft of a run stored before sources were recorded
ORIGINS = {
    "dflash": (f"accepted draft, {SOURCE_TITLES['dflash']}", f"background:{_tint(SOURCE_COLOURS['dflash'], 0.30)}"),
    "lookup": (
        f"accepted draft, {SOURCE_TITLES['lookup']}",
        f"background:{_tint(SOURCE_COLOURS['lookup'], 0.32)};text-decoration:underline;"
        f"text-decoration-color:{_tint(SOURCE_COLOURS['lookup'], 0.9, shade=0.7)};text-underline-offset:3px",
    ),
    "draft": ("accepted draft", f"background:{_tint(SOURCE_COLOURS['dflash'], 0.30)}"),
    "bonus": ("the target's own token (bonus / correction)", ""),
}


def title(mode: str) -> str:
    """A mode's title (`modes.MODES`); an unknown name as it is."""
    return MODES[mode].title if mode in MODES else mode


def duration(seconds: float) -> str:
    """Seconds for people: 0.84 s, 12 s, 3 min 05 s."""
    if seconds < 10:
        return f"{seconds:.2f} s" if seconds < 1 else f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def eta_text(done: float, total: float, elapsed_s: float) -> str:
    """'about 12 s left' at the pace so far; 'estimating the time left' before there is a pace."""
    if total <= 0 or done <= 0 or elapsed_s < 0.2:
        return "estimating the time left"
    if done >= total:
        return "almost done"
    return f"about {duration(elapsed_s * (total - done) / done)} left"


class TextSegments:
    """A mode's output as (text, origin, round) pieces whose concatenation is the decoded text.

    Pieces come from decoding growing prefixes of the committed ids, so multi-token
    characters and tokenizer spacing come out right; when a longer prefix decodes
    differently (an incomplete UTF-8 character completed later), earlier pieces are
    trimmed back to the common prefix first. The origin is a key of `ORIGINS`.
    """

    def __init__(self, decode):
        self.decode = decode
        self.ids: list[int] = []
        self.pieces: list[list] = []  # [text, origin, round index]
        self.text = ""

    def __getstate__(self) -> dict:
        """Pickled without the decode function (a stored run is finished and never extended)."""
        return {**self.__dict__, "decode": None}

    def _push(self, text: str, origin: str, round_index: int) -> None:
        common = 0
        limit = min(len(self.text), len(text))
        while common < limit and self.text[common] == text[common]:
            common += 1
        excess = len(self.text) - common
        while excess > 0:
            last = self.pieces[-1]
            cut = min(excess, len(last[0]))
            last[0] = last[0][: len(last[0]) - cut]
            excess -= cut
            if not last[0]:
                self.pieces.pop()
        if len(text) > common:
            self.pieces.append([text[common:], origin, round_index])
        self.text = text

    def add(self, record: RoundRecord) -> None:
        """Append one round: its accepted drafts, one piece per run of the same origin, then its
        bonus / correction token."""
        committed = list(record.committed_tokens)
        drafts = committed[:-1] if record.bonus_token is not None else committed
        sources = list(record.draft_sources[: len(drafts)]) or ["draft"] * len(drafts)
        start = 0
        while start < len(drafts):
            end = start
            while end < len(drafts) and sources[end] == sources[start]:
                end += 1
            self.ids.extend(drafts[start:end])
            self._push(
                self.decode(self.ids), sources[start] if sources[start] in ORIGINS else "draft", record.round_index
            )
            start = end
        if record.bonus_token is not None:
            self.ids.append(committed[-1])
            self._push(self.decode(self.ids), "bonus", record.round_index)

    def html(self) -> str:
        """The text as unpadded spans, one per piece and line; newlines stay text between them."""
        out: list[str] = []
        for text, origin, round_index in self.pieces:
            label, style = ORIGINS.get(origin, ORIGINS["draft"])
            for k, line in enumerate(text.split("\n")):
                if k:
                    out.append("\n")
                if line:
                    out.append(
                        f'<span class="ls-tok" data-origin="{origin}" data-round="{round_index}" '
                        f'title="round {round_index}: {label}" style="{style}">{html.escape(line)}</span>'
                    )
        return "".join(out)


def _number(value: float | None, fmt: str, suffix: str = "") -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return format(value, fmt) + suffix


def column_html(
    mode: str,
    segments: TextSegments | None,
    summary: RunSummary | None,
    rank: int | None,
    waiting: str = "waiting…",
    tied_with: list[str] | tuple[str, ...] = (),
) -> str:
    """One race column: header with live counters and the finish place (a tie when its measured
    time is within noise of `tied_with`'s), then the text tinted by token origin."""
    color = mode_color(mode)
    badge = ""
    if rank is not None:
        place = f"finished {ORDINALS.get(rank, f'{rank}th')}"
        tie = (f" · within noise of {', '.join(title(m) for m in tied_with)}") if tied_with else ""
        badge = (
            f'<span class="ls-badge" style="background:{color};color:#fff;border-radius:9px;padding:1px 8px;'
            f'font-size:0.8em;margin-left:6px">{html.escape(place + tie)}</span>'
        )
    if summary is None:
        stats = "rounds – · τ – · – tok/s · speedup – (measured) / – (modeled)<br>a round takes – ms"
    else:
        stats = (
            f"rounds {summary.rounds} · τ {_number(summary.tau, '.2f')} · "
            f"{_number(summary.tokens_per_s, '.1f')} tok/s · speedup "
            f"<b>{_number(summary.speedup_measured, '.2f', '×')}</b> (measured) / "
            f"{_number(summary.speedup_modeled, '.2f', '×')} (modeled)<br>a round takes "
            f"{_number(1000 * summary.round_s[1], '.0f')} ms (middle half {_number(1000 * summary.round_s[0], '.0f')}"
            f"–{_number(1000 * summary.round_s[2], '.0f')} ms)"
        )
    body = (
        segments.html()
        if segments is not None and segments.pieces
        else f'<span style="opacity:0.6">{html.escape(waiting)}</span>'
    )
    return (
        f'<div class="ls-column" data-mode="{html.escape(mode)}" style="border-top:4px solid {color};'
        f'padding:6px 4px 4px 4px">'
        f'<div style="font-weight:700;font-size:1.05em;color:{color}">{html.escape(title(mode))}{badge}</div>'
        f'<div class="ls-stats" style="font-size:0.85em;opacity:0.85;margin:2px 0 6px 0">{stats}</div>'
        f'<div class="ls-text" style="white-space:pre-wrap;overflow-wrap:break-word;line-height:1.6;font-size:0.95em;'
        f'max-height:{TEXT_HEIGHT};overflow-y:auto">{body}</div></div>'
    )


def legend_html() -> str:
    """What the tints mean, with a sample of each, on one line."""
    samples = " ".join(
        f'<span style="{style};padding:0 2px">{html.escape(label)}</span>'
        for origin, (label, style) in ORIGINS.items()
        if origin not in ("draft", "bonus")
    )
    return (
        '<div class="ls-legend" style="font-size:0.85em;opacity:0.9">'
        f"{samples} · plain: the target's own token · hover a token for its round · speedups are over AR "
        "decoding of the same prompt · τ: tokens per round</div>"
        '<div class="ls-legend ls-definitions" style="font-size:0.85em;opacity:0.9">'
        "<b>measured</b>: wall-clock seconds on this machine (drafting, policy and verification; the "
        "prompt's prefill excluded), so it carries timing noise · <b>modeled</b>: the same rounds priced "
        "by the latency profile (the inspector's last figure), the same every time they are made</div>"
    )


def status_html(
    message: str,
    prompt: str | None = None,
    notes: list[str] | tuple[str, ...] = (),
    progress: str = "",
    error: bool = False,
) -> str:
    """Status: the message (red when `error`); one line with the progress and the prompt; one line of
    notes. Everything is escaped; the prompt box holds the whole prompt, so its line is cut to fit."""
    colour = ' style="color:#B42318"' if error else ""
    parts = [f'<div class="ls-status{" ls-error" if error else ""}"><b{colour}>{html.escape(message)}</b>']
    line = [f'<span class="ls-progress">{html.escape(progress)}</span>'] if progress else []
    if prompt:
        shown = " ⏎ ".join(prompt.strip().splitlines())
        shown = shown if len(shown) <= 160 else shown[:160] + "…"
        line.append(f'<span style="opacity:0.75">Prompt: {html.escape(shown)}</span>')
    if line:
        parts.append(
            '<div style="font-size:0.85em;white-space:nowrap;overflow:hidden;text-overflow:ellipsis">'
            + " · ".join(line)
            + "</div>"
        )
    if (
        notes
    ):  # wrapped, never cut: a note explains what the figures beside it mean (each clamp is also under its field)
        text = html.escape(" · ".join(notes))
        parts.append(
            f'<div class="ls-notes" style="color:#9A6700;font-size:0.9em;overflow-wrap:anywhere">⚠ {text}</div>'
        )
    return "".join(parts) + "</div>"
