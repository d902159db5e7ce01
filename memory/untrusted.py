"""Untrusted text in prompts: journal text, tool output and the person's words quoted back to a
model go inside ``<untrusted>`` tags, escaped so they can open or close no tag (seed 001,
injection-like text). Pure; used by the window, the tool loop and the memory prompts.
"""

from __future__ import annotations

import html


def escape_untrusted(text: str) -> str:
    """``&``, ``<`` and ``>`` escaped, so the text can open or close no tag."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def wrap_untrusted(source: str, text: str) -> str:
    """``<untrusted source="...">`` + escaped text + ``</untrusted>``, for prompts."""
    return (
        f'<untrusted source="{html.escape(source, quote=True)}">\n'
        f"{escape_untrusted(text)}\n</untrusted>"
    )
