"""Models: the provider-neutral protocol (:mod:`~memory.llm.protocol`: ``LLM``, ``Message``,
blocks), the Anthropic and OpenAI-compatible providers and what they share around a call
(:mod:`~memory.llm.provider_calls`; streamed calls: :mod:`~memory.llm.streaming`,
:mod:`~memory.llm.anthropic_stream`, :mod:`~memory.llm.openai_stream`), the JSON object in a
reply (:mod:`~memory.llm.json_reply`), :mod:`~memory.llm.factory` (the one ``open_llm`` and
provider-settings check), the price table (:mod:`~memory.llm.cost`), usage rows and their
write-behind queue, and the LLM settings.

Imports ``runtime`` only. Provider modules (and their ``*_stream`` modules) import their SDK;
nothing else here does, so only the configured provider's SDK is loaded. Public:
``protocol.LLM``, ``factory.open_llm``, ``factory.check_llm_settings``,
``cost.configured_rates``, ``usage.log_api_usage``.
"""
