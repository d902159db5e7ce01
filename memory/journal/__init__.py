"""The journal: Day One import (:mod:`~memory.journal.dayone`), hybrid search
(:mod:`~memory.journal.search`) and the journal tools the model calls
(:mod:`~memory.journal.tools`); each chat owns its journal (:mod:`~memory.journal.owner`).

Imports embeddings, tools, the ranking's RRF and ``runtime``; not conversation or actors.
Public: ``dayone.import_dayone``, ``dayone.read_export``, ``tools.JOURNAL_TOOLS``.
"""
