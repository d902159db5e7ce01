"""The memory domain: the pattern store (:mod:`memory.patterns`), what compaction learns
(:mod:`memory.extraction`, :mod:`memory.compaction`), what a turn gets back
(:mod:`memory.retrieval`), the conversation's messages and episodes (:mod:`memory.conversation`),
the journal (:mod:`memory.journal`), models and their cost (:mod:`memory.llm`), embeddings
(:mod:`memory.embeddings`) and the model's tools (:mod:`memory.tools`); :mod:`memory.errors`
holds its error classes, :mod:`memory.settings` its settings, :mod:`memory.untrusted` the
untrusted-text rules (escaping, instruction-like text).

Imports ``runtime`` only, never ``actors``. Sub-packages form no circle (tests/test_layering.py):
conversation <- retrieval <- patterns <- extraction <- compaction.
"""
