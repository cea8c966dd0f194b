-- Input is delivered when it is due on the database's clock. An input row's
-- offset_ms counts from the command's started_at (the database's now() when
-- the container started); the executor counted it from its own hand-over,
-- a little later (on a cold start, the whole start later), so live input,
-- due at once, waited that long on every key. pending_input now says how
-- long each row has yet to wait, from the same clock that stamped it: 0 for
-- live input, the rest of its recorded offset for a replay's.

DROP FUNCTION shell.pending_input(bigint, text, integer, integer);
CREATE FUNCTION shell.pending_input(p_command_id bigint, p_worker_id text, p_attempt integer, p_after_seq integer)
RETURNS TABLE (seq integer, due_in_ms bigint, kind text, data text, cols integer, rows integer)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = '' AS $$
    SELECT i.seq,
           greatest(0, i.offset_ms - floor(extract(epoch FROM
               clock_timestamp() - coalesce(c.started_at, clock_timestamp())) * 1000))::bigint,
           i.kind, coalesce(i.data, s.data), i.cols, i.rows
    FROM shell.held_command(p_command_id, p_worker_id, p_attempt) c
    JOIN shell.command_input i ON i.command_id = c.id
    LEFT JOIN shell.secret_input s ON s.command_id = i.command_id AND s.seq = i.seq
    WHERE i.seq > p_after_seq
    ORDER BY i.seq
    LIMIT 256
$$;

COMMENT ON FUNCTION shell.pending_input(bigint, text, integer, integer) IS
    'Executor: up to 256 input rows after p_after_seq, to deliver, with the bytes of redacted ones (from '
    'shell.secret_input), each with due_in_ms: how long it has yet to wait (its offset_ms less the time '
    'since the command started, on the database''s clock; 0 for live input). PS001 when the lease is lost.';
