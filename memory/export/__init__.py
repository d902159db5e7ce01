"""A chat's memory as one portable document and back: the snapshot (sections, its JSON Schema,
the builder and the importer), the Letta Agent File view of the profile, and the Day One
journal export."""
