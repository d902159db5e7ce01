"""The turn: what the model is shown (:mod:`~actors.agent.context`), the tool loop with its
guardrails (:mod:`~actors.agent.tool_loop`), journal-entry links of a turn
(:mod:`~actors.agent.turn_links`), the turn handler (:mod:`~actors.agent.handler`), what follows
a turn (:mod:`~actors.agent.turn_budget`: its log line, the compaction rule after it), a
routine's turn (:mod:`~actors.agent.routine_turn`: the brief, the ``decline`` tool) and the
interface the chat actor calls (:mod:`~actors.agent.turn`: ``TurnInput``, ``TurnReply``,
``TurnHandler``).

Imports ``memory`` and the queues' types; not the chat actor, the sender or the CLI.
Public: ``handler.Agent``, ``handler.sql_agent``, ``handler.agent_tools``,
``context.build_context``, ``turn.TurnHandler``.
"""
