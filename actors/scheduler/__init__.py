"""The proactive lane: engram speaks first, at the right moment (seed 000 "Proactive Messaging").

``routine`` — what a routine is (its rule, its brief) and the inbox row that carries a due run
to the chat's actor, so a routine is ordered with the person's messages and never runs beside a
turn; ``routines/`` — the routines themselves, each a rule on the database alone
(``all_routines``); ``routine_settings`` — their thresholds.

``scheduler`` — the singleton actor: due jobs claimed ``FOR UPDATE SKIP LOCKED``, gated, turned
into inbox rows; ``jobs`` — the cron_jobs / chat_proactive / proactive_runs store; ``schedule``
— cron next runs in a zone (cronsim) and natural dates (dateparser); ``gates`` — the safety
gates, pure; ``settings`` — the PROACTIVE_* settings. The chat commands that steer it live in
``actors.chat.proactive_commands`` (the chat's command table is the chat's).

``heartbeat`` — the bot's periodic self-check (a job of ``actors.wiring.JOBS``) and one alert per
incident to the owner chat; ``health_checks`` — the checks themselves, on the database alone
(also ``engram doctor``); ``heartbeat_settings`` — HEARTBEAT_INTERVAL, DAILY_COST_ALERT_USD,
ALERT_CHAT_ID.

Imports ``memory``, ``runtime``, the queues and the turn's types; not the chat actor.
"""
