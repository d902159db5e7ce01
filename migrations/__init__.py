"""``NNN_name.sql`` files applied in order by :mod:`runtime.migrate` (package data; no code)."""
