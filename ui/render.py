"""HTML for the race columns: each round's tokens in one box, accepted drafts vs the bonus token.

Reads round records only (tau = accepted drafts + 1 bonus / correction token per round).
Every piece of user or model text passes through `html.escape`; styles are inline so the
HTML renders the same in the app, in exported pages and in tests.
"""
from __future__ import annotations

import html
import math

from libraspec.views.plots import MODE_COLORS, mode_color
from libraspec.records import RoundRecord, RunSummary

TITLES = {"ar": "Autoregressive", "static": "Static", "libraspec": "LibraSpec", "oracle": "Oracle",
          "g4": "G4", "failfast": "Fail-fast"}
BONUS_COLOR = "#B0006A"  # the target's bonus / correction token
ORDINALS = {1: "1st", 2: "2nd", 3: "3rd"}


def title(mode: str) -> str:
    return TITLES.get(mode, mode)


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[k:k + 2], 16) for k in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


class TextSegments:
    """A mode's output as (text, kind, round) pieces whose concatenation is the decoded text.

    Pieces come from decoding growing prefixes of the committed ids, so multi-token
    characters and tokenizer spacing come out right; when a longer prefix decodes
    differently (an incomplete UTF-8 character completed later), earlier pieces are
    trimmed back to the common prefix first.
    """

    def __init__(self, decode):
        self.decode = decode
        self.ids: list[int] = []
        self.pieces: list[list] = []  # [text, kind ("draft" | "bonus"), round index]
        self.text = ""

    def __getstate__(self) -> dict:
        """Pickled without the decode function (a stored run is finished and never extended)."""
        return {**self.__dict__, "decode": None}

    def _push(self, text: str, kind: str, round_index: int) -> None:
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
            self.pieces.append([text[common:], kind, round_index])
        self.text = text

    def add(self, record: RoundRecord) -> None:
        """Append one round: its accepted drafts, then its bonus / correction token."""
        committed = list(record.committed_tokens)
        drafts = committed[:-1] if record.bonus_token is not None else committed
        if drafts:
            self.ids.extend(drafts)
            self._push(self.decode(self.ids), "draft", record.round_index)
        if record.bonus_token is not None:
            self.ids.append(committed[-1])
            self._push(self.decode(self.ids), "bonus", record.round_index)

    def html(self, mode: str) -> str:
        color = mode_color(mode)
        boxes: list[str] = []
        current, parts = None, []
        for text, kind, round_index in self.pieces + [["", "end", -1]]:
            if round_index != current and parts:
                shade = 0.10 if current % 2 == 0 else 0.22
                boxes.append(
                    f'<span title="round {current}" style="background:{_rgba(color, shade)};'
                    f'border:1px solid {_rgba(color, 0.45)};border-radius:3px;padding:0 1px;'
                    f'margin:0 1px;box-decoration-break:clone;-webkit-box-decoration-break:clone">'
                    + "".join(parts) + "</span>")
                parts = []
            current = round_index
            if kind == "draft":
                parts.append(html.escape(text))
            elif kind == "bonus":
                parts.append(f'<span style="color:{BONUS_COLOR};font-weight:700;'
                             f'text-decoration:underline dotted">{html.escape(text)}</span>')
        return "".join(boxes)


def _number(value: float | None, fmt: str, suffix: str = "") -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return format(value, fmt) + suffix


def column_html(mode: str, segments: TextSegments | None, summary: RunSummary | None,
                rank: int | None, waiting: str = "waiting…") -> str:
    """One race column: header with live counters, then the round-grouped text."""
    color = mode_color(mode)
    badge = ""
    if rank is not None:
        badge = (f'<span style="background:{color};color:#fff;border-radius:9px;padding:1px 8px;'
                 f'font-size:0.8em;margin-left:6px">finished {ORDINALS.get(rank, f"{rank}th")}</span>')
    if summary is None:
        stats = "rounds – · τ – · – tok/s · speedup – (measured) / – (modeled)"
    else:
        stats = (f"rounds {summary.rounds} · τ {_number(summary.tau, '.2f')} · "
                 f"{_number(summary.tokens_per_s, '.1f')} tok/s · speedup "
                 f"<b>{_number(summary.speedup_measured, '.2f', '×')}</b> (measured) / "
                 f"{_number(summary.speedup_modeled, '.2f', '×')} (modeled)")
    body = segments.html(mode) if segments is not None and segments.pieces else \
        f'<span style="opacity:0.6">{html.escape(waiting)}</span>'
    return (
        f'<div class="ls-column" data-mode="{html.escape(mode)}" style="border-top:4px solid {color};'
        f'padding:6px 4px 4px 4px">'
        f'<div style="font-weight:700;font-size:1.05em;color:{color}">{html.escape(title(mode))}{badge}</div>'
        f'<div class="ls-stats" style="font-size:0.85em;opacity:0.85;margin:2px 0 6px 0">{stats}</div>'
        f'<div class="ls-text" style="white-space:pre-wrap;overflow-wrap:anywhere;line-height:1.7;font-size:0.95em;'
        f'max-height:440px;overflow-y:auto">{body}</div></div>')


def legend_html() -> str:
    sample = _rgba(MODE_COLORS["libraspec"], 0.16)
    return (
        '<div style="font-size:0.85em;opacity:0.9">'
        f'<span style="background:{sample};border:1px solid {_rgba(MODE_COLORS["libraspec"], 0.45)};'
        'border-radius:3px;padding:0 4px">one box = one round</span> &nbsp; '
        'plain text = draft tokens the target accepted &nbsp; '
        f'<span style="color:{BONUS_COLOR};font-weight:700;text-decoration:underline dotted">'
        'coloured</span> = the target\'s own bonus / correction token (1 per round). '
        'Speedups are over autoregressive decoding of the same prompt and settings: measured '
        'wall clock and the latency-profile model. τ = tokens committed per round.</div>')


def status_html(message: str, prompt: str | None = None, notes: list[str] | tuple[str, ...] = ()) -> str:
    """Status line; the prompt and notes are escaped like every other text."""
    parts = [f'<div class="ls-status"><b>{html.escape(message)}</b>']
    for note in notes:
        parts.append(f'<div style="color:#9A6700">⚠ {html.escape(note)}</div>')
    if prompt:
        shown = prompt if len(prompt) <= 400 else prompt[:400] + "…"
        parts.append(f'<div style="opacity:0.75;font-size:0.85em;white-space:pre-wrap">'
                     f'Prompt: {html.escape(shown)}</div>')
    return "".join(parts) + "</div>"
