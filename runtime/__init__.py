"""The process plumbing: actor kernel (:mod:`~runtime.actor` mailboxes, :mod:`~runtime.supervisor`,
keyed :mod:`~runtime.registry`, :mod:`~runtime.shutdown`), settings core, logs, the database
(:mod:`runtime.db`, the only importer of asyncpg and trio_asyncio; :mod:`~runtime.db_pool`,
:mod:`~runtime.embedded_pg`), the migration runner, the HTTP server and the CLI's core.

Knows nothing of Telegram, models or memory: imports no ``memory`` or ``actors`` module.
Public: ``db.Database``, ``db.Queries``, ``db.open_database``, ``actor.Mailbox``,
``registry.Registry``, ``supervisor.supervise``, ``shutdown.Shutdown``, ``serve.serve``,
``process_settings.ProcessSettings``, ``settings.Field``, ``settings.load_settings``,
``logs.get_logger``, ``migrate.apply_migrations``, ``cli.run_cli``, ``errors`` (every runtime
error class).
"""
