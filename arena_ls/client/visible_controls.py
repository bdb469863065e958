"""Names are data: what the terminal client prints of the manifest's and the trainers' text
has its control characters and bidi overrides made visible (issue 24 item 7).

A job ``name`` holding ``\\x1b[2J`` would clear the user's terminal, an OSC
sequence would retitle it (or, on some terminals, write the clipboard), and a
right-to-left override (U+202E) would make ``gpj.exe`` read as ``exe.jpg``.
``visible`` shows them instead: C0 controls and DEL in caret notation
(``\\x1b`` as ``^[``, ``\\x07`` as ``^G``, a line feed as ``^J``), C1 controls,
bidi controls and other invisible format characters as ``<U+202E>``. A tab
stays a tab. It is applied where ``arena`` writes (``render.write_line``,
``write_plain``, the log-line and progress renderers, ``arena status``'s
tables, the error lines on stderr), so a new command that prints through them
is covered; ``--json`` output is JSON, whose encoder escapes them already.
"""

from __future__ import annotations

import re
from typing import Any

_HIDDEN = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2028\u2029"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]"
)


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    return f"<U+{code:04X}>"


def visible(text: str) -> str:
    """``text`` with every control, bidi and invisible format character made visible."""
    return _HIDDEN.sub(_shown, text)


def visible_markup(text: str) -> str:
    """``visible``, and ``rich`` markup in it shown as typed (a name ``[red]x`` is not a style)."""
    from rich.markup import escape  # start-up speed: `arena lint` prints without loading rich

    return escape(visible(text))


def visible_data(value: Any) -> Any:
    """A server answer with every string in it passed through ``visible_markup`` (for tables)."""
    if isinstance(value, str):
        return visible_markup(value)
    if isinstance(value, dict):
        return {key: visible_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [visible_data(item) for item in value]
    return value
