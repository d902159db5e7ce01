"""nightly-reflection (21:00): a gentle reflection question, only on a day the person neither
journaled (an entry of the chat that local day) nor wrote (a message of theirs that local day);
tied to their strongest active goal when they have one. Once a local day at most."""

from __future__ import annotations

import attrs

from actors.scheduler.routine import Brief, RoutineContext
from actors.scheduler.routines.days import day_bounds, local_now, sent_today
from memory.untrusted import wrap_untrusted

# the day's entries by (chat_id, created_at); the day's messages by the chat's live-message
# index, and those compacted since (a message compacted today was compacted after the day began:
# the index on compacted_at)
_DAY = """
SELECT EXISTS (SELECT 1 FROM entries
               WHERE chat_id = $1 AND created_at >= $2 AND created_at < $3) AS journaled,
       EXISTS (SELECT 1 FROM chat_messages
               WHERE chat_id = $1 AND created_at >= $2 AND created_at < $3
                 AND compacted_at IS NULL AND role = 'user')
       OR EXISTS (SELECT 1 FROM chat_messages
                  WHERE compacted_at >= $2 AND chat_id = $1 AND created_at >= $2
                    AND created_at < $3 AND role = 'user') AS wrote,
       (SELECT content FROM patterns
        WHERE chat_id = $1 AND status = 'active' AND kind = 'goal'
        ORDER BY is_core_tenet DESC, strength DESC, last_seen DESC, id LIMIT 1) AS goal
"""

PROMPT = (
    "It is evening and the person has neither written to you nor journaled today. Offer one "
    "short, gentle reflection question about their day (one or two sentences, no pressure, no "
    "reproach for the silence). If it would not be welcome now, decline."
)
GOAL = "\nIf it fits naturally, the question may touch a goal they hold:\n"


def reflection_prompt(goal: str | None) -> str:
    """The routine turn's prompt, with the goal (the person's words: untrusted) if any."""
    return PROMPT if goal is None else PROMPT + GOAL + wrap_untrusted("memory", goal)


@attrs.frozen
class NightlyReflection:
    name: str = "nightly-reflection"
    title: str = "Evening reflection question"
    default_schedule: str = "0 21 * * *"

    async def decide(self, ctx: RoutineContext) -> Brief | None:
        start, end = day_bounds(local_now(ctx).date(), ctx.timezone)
        row = await ctx.db.fetchrow(_DAY, ctx.chat_id, start, end)
        if row["journaled"] or row["wrote"] or await sent_today(ctx, self.name):
            return None
        return Brief(prompt=reflection_prompt(row["goal"]))
