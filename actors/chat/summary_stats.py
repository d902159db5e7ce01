"""The chat's ``/summary`` and ``/stats`` commands: their wording. What they read is
:func:`memory.patterns.views.summary_view` and :func:`memory.patterns.stats.chat_stats`; dates are
shown in ``TIMEZONE`` (:mod:`runtime.clock`). The table listing them is
:mod:`actors.chat.commands`.
"""

from __future__ import annotations

from datetime import datetime

from actors.chat.memory_commands import MemoryServices, one_line
from memory.patterns.stats import chat_stats
from memory.patterns.views import summary_view
from runtime.clock import local_date, local_datetime
from runtime.words import count


async def summary_text(s: MemoryServices, chat_id: int) -> str:
    view = await summary_view(s.db, chat_id)
    lines = ["📜 Conversation summary"]
    for e in view.episodes:
        first, last = local_date(e.started_at, s.timezone), local_date(e.ended_at, s.timezone)
        span = first if first == last else f"{first} – {last}"
        lines += [
            "",
            f"📅 {span} ({count(e.message_count, 'message')}):",
            f"  {one_line(e.summary, 600)}",
        ]
    if view.total_episodes > len(view.episodes):
        lines += ["", f"… and {count(view.total_episodes - len(view.episodes), 'older summary')}"]
    if not view.episodes:
        lines += ["", "Nothing summarised yet."]
    since = (
        ""
        if view.first_verbatim is None
        else (f", since {local_datetime(view.first_verbatim, s.timezone)}")
    )
    lines += ["", f"💬 In view now: {count(view.verbatim, 'message')}{since}, not yet summarised."]
    return "\n".join(lines)


def money(usd: float) -> str:
    return f"${usd:.4f}" if usd < 1 else f"${usd:.2f}"


async def stats_text(s: MemoryServices, chat_id: int, now: datetime) -> str:
    st = await chat_stats(s.db, chat_id, now=now, timezone=s.timezone)
    lines = [
        "📊 This chat",
        f"Cost: today {money(st.today.cost_usd)} · this month "
        f"{money(st.month.cost_usd)} ({count(st.month.calls, 'model call')})",
    ]
    if st.month_by_purpose:
        parts = [f"{p} {money(v.cost_usd)}" for p, v in st.month_by_purpose.items()]
        lines.append("This month by purpose: " + ", ".join(parts))
    rate = st.degraded_rate
    degraded = (
        ""
        if rate is None
        else (f" · memory retrieval degraded in {st.degraded_month} ({rate:.1%})")
    )
    lines.append(f"Turns: {st.turns_today} today · {st.turns_month} this month{degraded}")
    if st.latency_avg is not None and st.latency_p95 is not None:
        lines.append(
            f"Reply time (last 30 days, {count(st.replies, 'reply')}): average "
            f"{st.latency_avg:.1f} s · p95 {st.latency_p95:.1f} s"
        )
    lines.append(
        f"Memories, last 7 days: {st.created_week} created · {st.reinforced_week} "
        f"reinforced · {st.merged_week} merged"
    )
    return "\n".join(lines)
