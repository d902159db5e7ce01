"""Retrieval: what a turn gets back from memory. The score is written once in
:mod:`~memory.retrieval.ranking` (the SQL generated from its constants), the statement in
:mod:`~memory.retrieval.sql`, the ranking in :mod:`~memory.retrieval.retriever`; the query's
words in :mod:`~memory.retrieval.query_text`, the time-aware hints in
:mod:`~memory.retrieval.temporal`; the profile every turn carries in
:mod:`~memory.retrieval.profile`, and the search of this chat's past behind
``recall_conversation`` in :mod:`~memory.retrieval.recall`.

Imports conversation, embeddings and ``runtime``; not the pattern store. Public:
``retriever.rank_patterns``, ``retriever.SqlPatternRetriever``, ``retriever.RetrievedMemory``,
``ranking`` (the formula), ``profile.SqlProfile``, ``recall.recall``.
"""
