"""The vault writer: the actor that keeps each chat's markdown vault in step with the database
after commits (debounced per chat); the rendering itself is :mod:`memory.vault`."""
