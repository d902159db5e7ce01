"""The ``engram`` command, one module per group: :mod:`~actors.cli.main` (the entry point,
``serve``), :mod:`~actors.cli.telegram`, :mod:`~actors.cli.journal`, :mod:`~actors.cli.patterns`
(``patterns`` and ``memory`` groups). The top layer: it may import everything; nothing
imports it. Public: ``main.main``.
"""
