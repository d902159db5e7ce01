-- A whole chat erased (issue 24 item 5): the in-chat confirmation waiting for its typed word,
-- and the check that keeps a late write of an erased chat from landing.

-- `/forget everything`, button tapped: the chat waits for the typed confirmation word from
-- `user_id` until `asked_at` + the command's time limit. Erased with the chat (it has chat_id).
CREATE TABLE erase_requests (
    chat_id     BIGINT PRIMARY KEY,
    user_id     BIGINT,
    message_id  BIGINT,
    asked_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- engram_check(ok, message): true, or an error (SQLSTATE EG001) naming `message`. Used inside
-- a statement that must write nothing at all when a condition fails (a data-modifying CTE
-- runs whether or not it is referenced; an error aborts the whole statement): a turn's commit
-- whose inbox rows were erased meanwhile writes none of its rows.
CREATE FUNCTION engram_check(ok BOOLEAN, message TEXT) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ok THEN
        RAISE EXCEPTION '%', message USING ERRCODE = 'EG001';
    END IF;
    RETURN true;
END
$$;
