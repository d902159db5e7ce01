"""A whole chat erased: every row of the chat in every table with a ``chat_id`` column (found in
the catalogue), in one transaction, then its vault folder (:mod:`memory.erase.chat`)."""
