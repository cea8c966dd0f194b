-- The input of a session's commands for `pg-shell audit verify` and its
-- export: the result record (version 5) states the SHA-256 of each command's
-- input stream (executor/audit/records.py, input_sha256), recomputed from
-- these rows; redacted rows come without bytes, by their hash alone.
CREATE FUNCTION shell.audit_input(p_session_id uuid)
RETURNS TABLE (command_id bigint, seq integer, offset_ms bigint, kind text, data text, length integer,
               sha256 text, redacted boolean, cols integer, rows integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT i.command_id, i.seq, i.offset_ms, i.kind, i.data, i.length, i.sha256, i.redacted, i.cols, i.rows
    FROM shell.command_input i JOIN shell.commands c ON c.id = i.command_id
    WHERE c.session_id = p_session_id
    ORDER BY i.command_id, i.seq
$$;
COMMENT ON FUNCTION shell.audit_input(uuid) IS
    'Every input row of a session''s commands, in order, for the audit; redacted rows have no data.';
