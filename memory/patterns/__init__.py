"""Pattern memory: what compaction learns and what a turn gets back. Extraction
(:mod:`~memory.patterns.claims`, prompt, :mod:`~memory.patterns.guardrails` with grounding),
compaction (:mod:`~memory.patterns.compaction`, one transaction in ``compaction_tx``), dedup and
adjudication, reinforcement and decay math, writes, merge, explicit patterns (``remember``),
entry links, and retrieval: the score is written once in :mod:`~memory.patterns.ranking` (the SQL
generated from its constants), the statement in ``retrieval_sql``, the ranking in ``retrieval``;
the time-aware hints in ``temporal``; the profile every turn carries in ``profile``; the
episodes (summaries of compacted spans) a turn shows in ``episodes``, the search of this
chat's past behind ``recall_conversation`` in ``recall``, and the compaction sweep (idle chats,
old backlogs) in ``backlog``. What a person sees and does (the chat commands, and the model's
memory tools, one path): ``views`` and ``why`` (reads), ``controls`` (forget, pin, merge one
pair, link), ``restore`` (undo a supersede within a day), ``stats``; every status change and
pin is written with its audit row by ``audit``.

Imports conversation, embeddings, llm and ``runtime``; not tools, journal or actors.
Public: ``compaction.compact_chat``, ``retrieval.rank_patterns``, ``retrieval.SqlPatternRetriever``,
``retrieval.RetrievedMemory``, ``explicit.store_explicit_pattern``, ``dedup.find_duplicate``,
``merge.merge_patterns``, ``ranking`` (the formula), ``profile.SqlProfile``,
``writes.set_core_tenet``, ``episodes.SqlEpisodes``, ``recall.recall``,
``backlog.CompactionSweep``.
"""
