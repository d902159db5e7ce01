-- Turn speed (issue 4): an entry's time zone is a zone PostgreSQL resolves, or NULL.
--
-- The journal tools read an entry's local time as created_at AT TIME ZONE
-- coalesce(timezone, <context zone>); checking each zone against pg_timezone_names in every
-- query cost ~15 ms a search. The import checks zones in Python (zoneinfo); this trigger
-- covers any other writer (COPY included): a zone AT TIME ZONE rejects is stored as NULL,
-- so a read never fails on one.

-- existing rows: the rule the reads applied until now (a name pg_timezone_names lists)
UPDATE entries SET timezone = NULL
WHERE timezone IS NOT NULL
  AND timezone NOT IN (SELECT name FROM pg_timezone_names);

CREATE FUNCTION entries_known_timezone() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        PERFORM now() AT TIME ZONE NEW.timezone;
    EXCEPTION WHEN invalid_parameter_value THEN
        NEW.timezone := NULL;
    END;
    RETURN NEW;
END;
$$;

CREATE TRIGGER entries_known_timezone
    BEFORE INSERT OR UPDATE OF timezone ON entries
    FOR EACH ROW WHEN (NEW.timezone IS NOT NULL)
    EXECUTE FUNCTION entries_known_timezone();
