"""The pattern store: writes (:mod:`~memory.patterns.writes`), the canonical form
(``canonical``), dedup and adjudication (``dedup``), merge (``merge``; its candidate pairs in
``merge_candidates``), reinforcement and decay math (``reinforcement``), contradictions and the
relations between patterns (``relations``), explicit patterns (``remember``, in ``explicit``),
entry links, forgetting and maintenance. What a person sees and does (the chat commands, and the
model's memory tools, one path): ``views`` and ``why`` (reads), ``controls`` (forget, pin, merge
one pair, link), ``restore`` (undo a supersede within a day), ``stats``, ``topic``; every status
change and pin is written with its audit row by ``audit``.

Imports retrieval (the weight formula, the ranking), conversation (episodes), embeddings, llm,
untrusted and ``runtime``; not extraction, compaction, tools, journal or actors. Public:
``explicit.store_explicit_pattern``, ``dedup.find_duplicate``, ``merge.merge_patterns``,
``writes.set_core_tenet``.
"""
