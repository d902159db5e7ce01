"""Embeddings: the providers (OpenAI, the bundled wordllama model), their side tables and
backfill (:mod:`~memory.embeddings.store`), re-embedding after a model change, and similarity
thresholds per model (:mod:`~memory.embeddings.thresholds`).

Imports llm (cost and usage rows) and ``runtime``. Public: ``providers.Embedder``,
``factory.open_embedder``, ``store.store_vectors``, ``store.EmbeddingBackfill``,
``reembed.reembed``, ``thresholds.thresholds_for``.
"""
