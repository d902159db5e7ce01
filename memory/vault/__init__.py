"""The markdown vault: a readable copy of each chat's memory in ``<VAULT_DIR>/<chat id>/``
(daily pages, ``MEMORY.md``, a page per pattern), written from the database, which stays the
source of truth. :mod:`~memory.vault.settings` says where it lives, :mod:`~memory.vault.data`
reads a chat in one place, :mod:`~memory.vault.render` turns it into files (pure functions),
:mod:`~memory.vault.files` writes them atomically, :mod:`~memory.vault.write` joins the three
(the writer actor, :mod:`actors.vault.writer`, and ``engram vault rebuild`` call it)."""
