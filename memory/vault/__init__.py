"""The markdown vault: a readable copy of each chat's memory in ``<VAULT_DIR>/<chat id>/``
(daily pages, ``MEMORY.md``, a page per pattern), written from the database, which stays the
source of truth. :mod:`memory.vault.settings` says where it lives."""
