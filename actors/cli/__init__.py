"""The ``engram`` command, one module per group: :mod:`~actors.cli.main` (the entry point,
``serve``), :mod:`~actors.cli.telegram`, :mod:`~actors.cli.chats`, :mod:`~actors.cli.config`,
:mod:`~actors.cli.journal`, :mod:`~actors.cli.patterns` (``patterns`` and ``memory`` groups),
:mod:`~actors.cli.systemd` (the unit file shipped beside it, ``engram.service``). The top layer:
it may import everything; nothing imports it. Imports are lazy: each module imports what a
command needs inside its handler, so ``engram --help`` loads none of the bot. Public:
``main.main``.
"""
