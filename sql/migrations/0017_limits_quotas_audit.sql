-- Limits, quotas and audit under hostile tenants (DESIGN.md §11):
--   1. output is stored once, in shell.output_chunks (with its timing);
--      commands.output only holds output that never streamed (none);
--   2. a per-tenant quota on stored output bytes, checked on submit;
--   3. shell.ansi_html in linear time, whatever the output's size;
--   4. result records, version 3, bind their chain position: chain_seq and
--      chain_prev are in the (signed) record, so deleting, reordering or
--      re-linking signed links breaks a signature check, not only a hash.

-- 1. Output stored once ------------------------------------------------------------

-- The chunks are the copy: they carry the arrival times `pg-shell play`
-- replays, and shell.output_of already joins them. Commands that ended
-- before this migration drop their second copy.
UPDATE shell.commands c SET output = NULL
WHERE c.output IS NOT NULL AND EXISTS (SELECT FROM shell.output_chunks o WHERE o.command_id = c.id);

-- The facts read the output where it is stored.
CREATE OR REPLACE FUNCTION shell.result_facts(c shell.commands) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT jsonb_build_object(
        'command_id', c.id, 'session_id', c.session_id::text, 'user_id', c.user_id::text,
        'command_sha256', shell.sha256_hex(c.command), 'status', c.status,
        'exit_code', c.exit_code, 'reason', c.reason, 'truncated', c.truncated,
        'output_sha256', shell.sha256_hex(shell.output_of(c)),
        'cwd_before', c.cwd_before, 'env_before', c.env_before,
        'cwd_after', c.cwd_after, 'env_after', c.env_after,
        'image_digest', c.image_digest, 'worker_id', c.worker_id, 'attempt', c.attempts,
        'duration_ms', c.duration_ms, 'root_before', c.root_before, 'root_after', c.root_after)
$$;

-- The audit view's output is the stored one (chunks), chunks_sha256 stays
-- for exports made before.
DROP FUNCTION shell.audit_history(uuid);
CREATE FUNCTION shell.audit_history(p_session_id uuid DEFAULT NULL)
RETURNS TABLE (session_id uuid, command_id bigint, chain_seq bigint, chain_prev text, chain_hash text,
               result_record text, signature text, key_id text, user_id uuid, command text,
               status text, exit_code integer, reason text, truncated boolean, output text,
               cwd_before text, env_before jsonb, cwd_after text, env_after jsonb, image_digest text,
               worker_id text, attempt integer, duration_ms integer, chunks_sha256 text,
               root_before text, root_after text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT c.session_id, c.id, c.chain_seq, c.chain_prev, c.chain_hash, c.result_record, c.signature,
           c.key_id, c.user_id, c.command, c.status, c.exit_code, c.reason, c.truncated,
           shell.output_of(c), c.cwd_before, c.env_before, c.cwd_after, c.env_after, c.image_digest,
           c.worker_id, c.attempts, c.duration_ms, NULL::text, c.root_before, c.root_after
    FROM shell.commands c
    WHERE (p_session_id IS NULL OR c.session_id = p_session_id)
      AND (c.status IN ('done', 'failed', 'cancelled') OR c.chain_seq IS NOT NULL)
    ORDER BY c.session_id, c.chain_seq NULLS LAST, c.id
$$;

-- Completion no longer copies the chunks into commands.output.
CREATE OR REPLACE FUNCTION shell.complete_command(
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
        root_after = new_root, lease_expires_at = NULL, change_seq = lease.change
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

CREATE OR REPLACE FUNCTION shell.release_command(p_command shell.commands, p_container_started boolean,
                                                 p_reason text, p_only_if_expired boolean)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    seq bigint;
    current shell.commands;
BEGIN
    UPDATE shell.lanes l SET change_seq = l.change_seq + 1
    WHERE l.session_id = p_command.session_id RETURNING l.change_seq INTO seq;
    SELECT * INTO current FROM shell.commands c WHERE c.id = p_command.id FOR UPDATE;
    IF current.status NOT IN ('claimed', 'running') OR current.attempts <> p_command.attempts
       OR (p_only_if_expired AND current.lease_expires_at >= now()) THEN
        RETURN current.status;  -- settled or renewed meanwhile
    END IF;
    IF current.status = 'claimed' AND NOT (p_container_started OR current.container_id IS NOT NULL) AND current.attempts < 5 THEN
        UPDATE shell.commands c SET status = 'pending', worker_id = NULL, lease_expires_at = NULL,
            claimed_at = NULL, cwd_before = NULL, env_before = NULL, change_seq = seq
        WHERE c.id = current.id;
        UPDATE shell.lanes l SET pending = l.pending + 1, active_command_id = NULL,
            ready_since = current.submitted_at
        WHERE l.session_id = current.session_id;
        RETURN 'pending';
    END IF;
    UPDATE shell.commands c SET status = 'failed', completed_at = now(), lease_expires_at = NULL,
        reason = CASE WHEN current.status = 'claimed' AND NOT (p_container_started OR current.container_id IS NOT NULL)
                      THEN 'gave up after ' || current.attempts || ' attempts' ELSE p_reason END,
        cwd_after = current.cwd_before, env_after = current.env_before, change_seq = seq
    WHERE c.id = current.id;
    PERFORM shell.chain_result(current.id);
    UPDATE shell.lanes l SET active_command_id = NULL,
        ready_since = CASE WHEN l.pending > 0 THEN now() ELSE l.ready_since END
    WHERE l.session_id = current.session_id;
    RETURN 'failed';
END
$$;
-- 2. Stored output quota ----------------------------------------------------------

ALTER TABLE shell.users ADD COLUMN max_output_bytes bigint NOT NULL DEFAULT 1073741824
    CHECK (max_output_bytes >= 0);
-- Summing a tenant's stored output reads this index alone.
CREATE INDEX commands_user_output ON shell.commands (user_id) INCLUDE (output_bytes);

-- NULL leaves a quota as it is; p_max_output_mb is in MiB.
DROP FUNCTION shell.set_user_quota(text, integer, integer, integer);
CREATE FUNCTION shell.set_user_quota(
    p_username text,
    p_max_sessions integer DEFAULT NULL,
    p_max_running integer DEFAULT NULL,
    p_max_queued integer DEFAULT NULL,
    p_max_output_mb integer DEFAULT NULL
) RETURNS TABLE (username text, max_sessions integer, max_running integer, max_queued integer,
                 max_output_mb bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    IF least(p_max_sessions, p_max_running, p_max_queued, p_max_output_mb) < 0 THEN
        RAISE EXCEPTION 'quotas cannot be negative' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    UPDATE shell.users u SET
        max_sessions = coalesce(p_max_sessions, u.max_sessions),
        max_running = coalesce(p_max_running, u.max_running),
        max_queued = coalesce(p_max_queued, u.max_queued),
        max_output_bytes = coalesce(p_max_output_mb::bigint * 1048576, u.max_output_bytes)
    WHERE u.username = p_username
    RETURNING u.username, u.max_sessions, u.max_running, u.max_queued, u.max_output_bytes / 1048576;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no user %', p_username USING ERRCODE = '22023';
    END IF;
END
$$;

-- A tenant whose commands' stored output reached the quota submits no more
-- until retention (or an administrator) frees some. The check is on submit:
-- a running command may still add up to its output cap.
CREATE FUNCTION shell.check_output_quota(p_user_id uuid) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    quota bigint := (SELECT u.max_output_bytes FROM shell.users u WHERE u.id = p_user_id);
    stored bigint := (SELECT coalesce(sum(c.output_bytes), 0) FROM shell.commands c
                      WHERE c.user_id = p_user_id);
BEGIN
    IF stored >= quota THEN
        RAISE EXCEPTION 'stored output quota reached (% of % bytes)', stored, quota
            USING ERRCODE = 'PT429',
            DETAIL = 'The quota max_output_bytes counts the output of every command kept.',
            HINT = 'Ask an administrator to raise it (pg-shell user quota --output-mb), '
                   'or wait for retention to remove old commands.';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION shell_api.submit_command(p_session_id uuid, p_command text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    s shell.sessions;
BEGIN
    -- \x0b is the vertical tab: E'\v' is not an escape in PostgreSQL (it is "v").
    IF p_command IS NULL OR btrim(p_command, E' \t\r\n\f\x0b') = '' THEN
        RAISE EXCEPTION 'command is empty' USING ERRCODE = '22023', HINT = 'Type a command to run.';
    END IF;
    IF octet_length(p_command) > 1048576 THEN
        RAISE EXCEPTION 'command is too large (% bytes)', octet_length(p_command)
            USING ERRCODE = 'PT413', DETAIL = 'A command may be at most 1048576 bytes.',
                  HINT = 'Put long scripts in a file in the session and run the file.';
    END IF;
    s := shell.owned_session(p_session_id);
    PERFORM shell.check_output_quota(s.user_id);
    RETURN shell.enqueue(s, p_command);
END
$$;

-- 3. Colours in linear time -------------------------------------------------------

-- The same HTML as before (sql/migrations/0007_live_html.sql), built from
-- one split of the text: each segment and the codes that follow it come in
-- order from one unnest, and the pieces collect in an array joined once, so
-- neither indexing nor concatenation grows with the text already done.
-- Every size gets its colours now (the 64 KiB cut-off is gone).
CREATE OR REPLACE FUNCTION shell.ansi_html(t text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = '' AS $$
DECLARE
    sgr constant text := E'\x1b\\[([0-9;]*)m';
    other_escapes constant text := E'\x1b(\\[[0-9;?]*[ -/]*[@-~]|\\][^\x07\x1b]*(\x07|\x1b\\\\)?|.)?';
    pieces text[] := '{}';
    fg text := '';
    bg text := '';
    bold boolean := false;
    classes text;
    segment text;
    codes text;
    code text;
    n integer;
BEGIN
    IF t IS NULL OR t = '' THEN
        RETURN '';
    END IF;
    IF strpos(t, E'\x1b') = 0 THEN
        RETURN shell.html_escape(t);
    END IF;
    FOR segment, codes IN
        SELECT u.part, u.codes
        FROM unnest(regexp_split_to_array(t, sgr),
                    ARRAY(SELECT m[1] FROM regexp_matches(t, sgr, 'g') AS m)) AS u(part, codes)
    LOOP
        segment := regexp_replace(segment, other_escapes, '', 'g');
        IF segment <> '' THEN
            classes := concat_ws(' ', nullif(fg, ''), nullif(bg, ''), CASE WHEN bold THEN 'ansi-bold' END);
            pieces := pieces || CASE WHEN classes = '' THEN shell.html_escape(segment)
                ELSE format('<span class="%s">%s</span>', classes, shell.html_escape(segment)) END;
        END IF;
        CONTINUE WHEN codes IS NULL;
        FOREACH code IN ARRAY string_to_array(CASE WHEN codes = '' THEN '0' ELSE codes END, ';') LOOP
            n := nullif(code, '')::integer;
            IF n IS NULL OR n = 0 THEN fg := ''; bg := ''; bold := false;
            ELSIF n = 1 THEN bold := true;
            ELSIF n = 22 THEN bold := false;
            ELSIF n BETWEEN 30 AND 37 OR n BETWEEN 90 AND 97 THEN fg := 'ansi-fg-' || n;
            ELSIF n = 39 THEN fg := '';
            ELSIF n BETWEEN 40 AND 47 OR n BETWEEN 100 AND 107 THEN bg := 'ansi-bg-' || n;
            ELSIF n = 49 THEN bg := '';
            END IF;
        END LOOP;
    END LOOP;
    RETURN array_to_string(pieces, '');
END
$$;

-- 4. Records bind their chain position --------------------------------------------

-- Where a leased command's link will go: the next chain_seq of its session
-- and the hash it will follow. Locks the session's lane until the end of
-- the transaction, so the executor reads the head, signs a record that
-- names it, and completes (shell.complete_command) with nothing appended in
-- between.
CREATE FUNCTION shell.chain_position(p_command_id bigint, p_worker_id text, p_attempt integer,
                                     OUT chain_seq bigint, OUT chain_prev text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    leased shell.commands;
BEGIN
    SELECT l.chain_seq + 1, l.chain_head INTO chain_seq, chain_prev FROM shell.lanes l
    WHERE l.session_id = (SELECT c.session_id FROM shell.commands c WHERE c.id = p_command_id)
    FOR UPDATE;
    SELECT * INTO leased FROM shell.commands c WHERE c.id = p_command_id;
    IF leased.id IS NULL OR leased.worker_id IS DISTINCT FROM p_worker_id
       OR leased.attempts IS DISTINCT FROM p_attempt OR leased.status NOT IN ('claimed', 'running') THEN
        PERFORM shell.lease_lost(p_command_id, p_worker_id, p_attempt, leased);
    END IF;
END
$$;

-- As before (sql/migrations/0011_workspace.sql), plus: the database's own
-- records are version 3 and name their chain_seq and chain_prev; a signed
-- record of version 3 or later must name the position it is appended at.
-- Signed records of earlier versions (an executor not yet upgraded) are
-- still chained; `pg-shell audit verify` tells which records bind.
CREATE OR REPLACE FUNCTION shell.chain_result(p_command_id bigint, p_record text DEFAULT NULL,
                                              p_signature text DEFAULT NULL, p_key_id text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SET search_path = '' AS $$
DECLARE
    c shell.commands;
    rec text := p_record;
    facts jsonb;
    claimed jsonb;
    field text;
    prev text;
    seq bigint;
BEGIN
    SELECT * INTO c FROM shell.commands WHERE id = p_command_id;
    SELECT l.chain_seq + 1, l.chain_head INTO seq, prev FROM shell.lanes l
    WHERE l.session_id = c.session_id FOR UPDATE;
    facts := shell.result_facts(c);
    IF rec IS NULL THEN
        rec := (facts || jsonb_build_object(
            'v', 3, 'signer', 'database', 'started_at', shell.utc_text(c.started_at),
            'finished_at', shell.utc_text(c.completed_at), 'chain_seq', seq, 'chain_prev', prev))::text;
    ELSE
        BEGIN
            claimed := rec::jsonb;
        EXCEPTION WHEN others THEN
            RAISE EXCEPTION 'result record is not JSON' USING ERRCODE = '22023';
        END;
        IF jsonb_typeof(claimed) <> 'object' THEN
            RAISE EXCEPTION 'result record is not a JSON object' USING ERRCODE = '22023';
        END IF;
        IF jsonb_typeof(claimed -> 'v') <> 'number' THEN
            RAISE EXCEPTION 'result record has no version' USING ERRCODE = '22023';
        END IF;
        IF (claimed ->> 'v')::numeric >= 3 THEN
            facts := facts || jsonb_build_object('chain_seq', seq, 'chain_prev', prev);
        END IF;
        FOR field IN SELECT jsonb_object_keys(facts) LOOP
            IF claimed -> field IS DISTINCT FROM facts -> field THEN
                RAISE EXCEPTION 'result record disagrees with the command on %', field
                    USING ERRCODE = '22023',
                    DETAIL = format('record says %s, the command has %s',
                                    coalesce((claimed -> field)::text, 'nothing'), (facts -> field)::text),
                    HINT = 'From version 3 on, read chain_seq and chain_prev with '
                           'shell.chain_position in the transaction that completes.';
            END IF;
        END LOOP;
        IF p_signature IS NULL OR p_signature !~ '^[0-9a-f]{128}$'
           OR claimed ->> 'signer' IS DISTINCT FROM p_key_id
           OR NOT EXISTS (SELECT FROM shell.signing_keys k WHERE k.key_id = p_key_id) THEN
            RAISE EXCEPTION 'result record is not signed by a registered key' USING ERRCODE = '22023',
                HINT = 'Register the key with shell.register_signing_key first.';
        END IF;
    END IF;
    UPDATE shell.lanes l SET chain_seq = seq, chain_head = shell.sha256_hex(prev || rec)
    WHERE l.session_id = c.session_id;
    UPDATE shell.commands SET result_record = rec, signature = p_signature,
        key_id = CASE WHEN p_record IS NULL THEN NULL ELSE p_key_id END,
        chain_seq = seq, chain_prev = prev, chain_hash = shell.sha256_hex(prev || rec)
    WHERE id = p_command_id;
END
$$;
