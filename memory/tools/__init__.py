"""The model's tools: the registry and JSON schemas (:mod:`~memory.tools.registry`,
:mod:`~memory.tools.schema`), result shaping (:mod:`~memory.tools.results`), the memory tools
(``recall_memory``, ``remember``, ``forget_memory``, and ``recall_conversation`` in
``conversation_tools``) and the personal tools (``log_weight``, ``weight_history``,
``get_usage``; the weight trend rule in ``weights``).

Imports patterns, llm, embeddings and ``runtime``; not journal or actors (the journal's tools
build on this registry). Public: ``registry.ToolRegistry``, ``registry.Tool``, ``registry.tool``,
``memory_tools.memory_tools``, ``conversation_tools.conversation_tools``,
``personal_tools.PERSONAL_TOOLS``.
"""
