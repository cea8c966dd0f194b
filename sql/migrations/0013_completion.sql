-- One completion value: an executor completes a command with its result
-- record alone, and the row's outcome is read from that record, so the list
-- of outcome fields lives in the record format (executor/audit/records.py)
-- and the SQL that checks it (shell.result_facts), not in a parameter list.

-- A lost lease gets a SQLSTATE of its own (class PS: pg_shell's executor
-- contract), so callers need not match on the message.
CREATE OR REPLACE FUNCTION shell.lease_lost(p_command_id bigint, p_worker_id text, p_attempt integer,
                                            p_found shell.commands)
RETURNS void
LANGUAGE plpgsql SET search_path = '' AS $$
BEGIN
    RAISE EXCEPTION 'lease lost on command %', p_command_id USING ERRCODE = 'PS001',
        DETAIL = format('expected worker %s attempt %s, found status %s worker %s attempt %s',
                        p_worker_id, p_attempt, coalesce(p_found.status, 'missing'),
                        coalesce(p_found.worker_id, '-'), coalesce(p_found.attempts::text, '-'));
END
$$;

DROP FUNCTION shell.complete_command(bigint, text, integer, text, integer, text, boolean, text,
                                     jsonb, integer, text, text, text);

-- Ends a claimed or running command. p_record is its result record: status,
-- exit_code, reason, truncated, duration_ms, cwd_after, env_after and
-- root_after say what the row and the session will hold (a missing cwd,
-- env or root keeps the one the command started from). A signed record
-- (p_signature by p_key_id) must agree with the row and the stored output
-- and is chained as it is; an unsigned one is replaced in the chain by a
-- record the database vouches for. The record's "host" (a hint, not a
-- fact) names the host whose copy of the files now holds root_after, whose
-- trees the executor stored first.
CREATE FUNCTION shell.complete_command(
    p_command_id bigint, p_worker_id text, p_attempt integer,
    p_record text, p_signature text DEFAULT NULL, p_key_id text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    lease record := shell.leased_command(p_command_id, p_worker_id, p_attempt, ARRAY['claimed', 'running']);
    cmd shell.commands := lease.leased;
    rec jsonb;
    new_status text;
    new_exit_code integer;
    new_truncated boolean;
    new_duration_ms integer;
    new_cwd text;
    new_env jsonb;
    new_root text;
BEGIN
    BEGIN
        rec := p_record::jsonb;
        new_status := rec ->> 'status';
        new_exit_code := (rec ->> 'exit_code')::integer;
        new_truncated := coalesce((rec ->> 'truncated')::boolean, false);
        new_duration_ms := (rec ->> 'duration_ms')::integer;
        new_cwd := coalesce(rec ->> 'cwd_after', cmd.cwd_before);
        new_env := coalesce(rec -> 'env_after', cmd.env_before);
        new_root := coalesce(rec ->> 'root_after', cmd.root_before);
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION 'result record is not a JSON object of the expected fields'
            USING ERRCODE = '22023', DETAIL = SQLERRM,
            HINT = 'exit_code and duration_ms are integers, truncated a boolean.';
    END;
    IF jsonb_typeof(rec) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'result record is not a JSON object' USING ERRCODE = '22023';
    END IF;
    IF new_status IS NULL OR new_status NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'invalid final status %', new_status USING ERRCODE = '22023';
    END IF;
    IF new_cwd NOT LIKE '/%' OR jsonb_typeof(new_env) <> 'object'
       OR EXISTS (SELECT FROM jsonb_each(new_env) e WHERE jsonb_typeof(e.value) <> 'string') THEN
        RAISE EXCEPTION 'invalid shell state' USING ERRCODE = '22023',
            DETAIL = 'cwd must be absolute and env an object of strings';
    END IF;
    IF new_root IS NOT NULL AND NOT EXISTS (SELECT FROM shell.trees t WHERE t.hash = new_root) THEN
        RAISE EXCEPTION 'root % is not stored', new_root USING ERRCODE = '22023',
            HINT = 'Store the trees and blobs of the new root before completing.';
    END IF;
    UPDATE shell.commands c SET status = new_status, exit_code = new_exit_code,
        reason = rec ->> 'reason', truncated = new_truncated, completed_at = now(),
        duration_ms = new_duration_ms, cwd_after = new_cwd, env_after = new_env,
        root_after = new_root, lease_expires_at = NULL, output = shell.output_of(cmd),
        change_seq = lease.change
    WHERE c.id = p_command_id;
    IF p_signature IS NULL THEN
        PERFORM shell.chain_result(p_command_id);
    ELSE
        PERFORM shell.chain_result(p_command_id, p_record, p_signature, p_key_id);
    END IF;
    UPDATE shell.sessions s SET cwd = new_cwd, env = new_env, root = new_root, last_active_at = now()
    WHERE s.id = cmd.session_id;
    UPDATE shell.lanes l SET active_command_id = NULL, cached_on = rec ->> 'host',
        ready_since = CASE WHEN l.pending > 0 THEN now() ELSE l.ready_since END
    WHERE l.session_id = cmd.session_id;
END
$$;
