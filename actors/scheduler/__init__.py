"""The proactive lane: engram speaks first, at the right moment (seed 000 "Proactive Messaging").

``routine`` — what a routine is (its rule, its brief) and the inbox row that carries a due run
to the chat's actor, so a routine is ordered with the person's messages and never runs beside a
turn.

``heartbeat`` — the bot's periodic self-check (a job of ``actors.wiring.JOBS``) and one alert per
incident to the owner chat; ``health_checks`` — the checks themselves, on the database alone
(also ``engram doctor``); ``heartbeat_settings`` — HEARTBEAT_INTERVAL, DAILY_COST_ALERT_USD,
ALERT_CHAT_ID.
"""
