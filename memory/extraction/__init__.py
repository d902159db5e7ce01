"""Extraction: what the model is asked at compaction and what its answer may hold.
:mod:`~memory.extraction.prompt` (the extraction prompt), :mod:`~memory.extraction.claims` (the
claims, parsed strictly), :mod:`~memory.extraction.grounding` (the grounding rule) and
:mod:`~memory.extraction.guardrails` (what is rejected and why), :mod:`~memory.extraction.extractor`
(the call: prompt, parse, one retry, guardrails). Pure but the call.

Imports ``memory.patterns`` (the canonical form), ``memory.retrieval`` (event days), llm,
untrusted and ``runtime``. Public: ``extractor.extract``, ``claims.parse_extraction``,
``claims.Extraction``, ``guardrails.check_extraction``, ``grounding.is_grounded``,
``prompt.user_prompt``.
"""
