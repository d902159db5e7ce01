"""The memory domain: pattern memory (:mod:`memory.patterns`), the conversation's messages
(:mod:`memory.conversation`), the journal (:mod:`memory.journal`), models and their cost
(:mod:`memory.llm`), embeddings (:mod:`memory.embeddings`) and the model's tools
(:mod:`memory.tools`); :mod:`memory.errors` holds its error classes, :mod:`memory.settings` its
settings, :mod:`memory.untrusted` the untrusted-text rule.

Imports ``runtime`` only, never ``actors``. Sub-packages form no circle (tests/test_layering.py).
"""
