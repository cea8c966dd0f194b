-- The tenant-facing API: everything PostgREST (or `pg-shell serve`) exposes.
-- Reads are invoker functions filtered by row-level security; writes are
-- definer functions that check ownership themselves.

-- The HTML forms of these functions (for the web UI) are in 0007_live_html.

CREATE FUNCTION shell.session_not_found() RETURNS void
LANGUAGE plpgsql SET search_path = '' AS $$
BEGIN
    -- The same error for a missing session and another tenant's, so ids
    -- cannot be probed.
    RAISE EXCEPTION 'session not found' USING ERRCODE = '22023',
        HINT = 'Use an id returned by create_session or list_sessions.';
END
$$;

CREATE FUNCTION shell.command_not_found() RETURNS void
LANGUAGE plpgsql SET search_path = '' AS $$
BEGIN
    RAISE EXCEPTION 'command not found' USING ERRCODE = '22023',
        HINT = 'Use an id returned by submit_command or latest_output.';
END
$$;

-- The caller's session, locked against concurrent quota checks; raises the
-- not-found error otherwise.
CREATE FUNCTION shell.owned_session(p_session_id uuid) RETURNS shell.sessions
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    -- Identity first: a caller who is nobody gets 42501 whether or not the
    -- id exists, so ids cannot be probed without signing in either.
    me uuid := shell.current_user_id();
    found shell.sessions;
BEGIN
    SELECT * INTO found FROM shell.sessions s
    WHERE s.id = p_session_id AND s.user_id = me;
    IF found.id IS NULL THEN
        PERFORM shell.session_not_found();
    END IF;
    RETURN found;
END
$$;

CREATE FUNCTION shell.owned_command(p_command_id bigint) RETURNS shell.commands
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    me uuid := shell.current_user_id();
    found shell.commands;
BEGIN
    SELECT * INTO found FROM shell.commands c
    WHERE c.id = p_command_id AND c.user_id = me;
    IF found.id IS NULL THEN
        PERFORM shell.command_not_found();
    END IF;
    RETURN found;
END
$$;

-- Starts a new session (with its lane) for a user, within their quota.
CREATE FUNCTION shell.new_session(
    p_user_id uuid, p_name text, p_cwd text, p_env jsonb,
    p_forked_from bigint DEFAULT NULL, p_replay_of uuid DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    quota integer;
    new_id uuid;
BEGIN
    IF p_name IS NOT NULL AND length(p_name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'session name must be 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
    -- The row lock serializes this user's session creation, so the count
    -- below cannot be raced past the quota.
    SELECT u.max_sessions INTO quota FROM shell.users u WHERE u.id = p_user_id FOR NO KEY UPDATE;
    IF (SELECT count(*) FROM shell.sessions s WHERE s.user_id = p_user_id) >= quota THEN
        RAISE EXCEPTION 'session quota reached (% sessions)', quota USING ERRCODE = 'PT429',
            HINT = 'Ask an administrator to raise max_sessions.';
    END IF;
    INSERT INTO shell.sessions (user_id, name, cwd, env, forked_from_command_id, replay_of_session_id)
    VALUES (p_user_id, p_name, p_cwd, p_env, p_forked_from, p_replay_of)
    RETURNING id INTO new_id;
    INSERT INTO shell.lanes (session_id, user_id) VALUES (new_id, p_user_id);
    RETURN new_id;
END
$$;

-- Queues one command on a session's lane (the caller has checked ownership).
CREATE FUNCTION shell.enqueue(
    p_session shell.sessions, p_command text,
    p_replay_run_id uuid DEFAULT NULL, p_replay_of bigint DEFAULT NULL, p_image_digest text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    quota integer;
    seq bigint;
    new_id bigint;
BEGIN
    SELECT u.max_queued INTO quota FROM shell.users u WHERE u.id = p_session.user_id FOR NO KEY UPDATE;
    IF (SELECT count(*) FROM shell.commands c
        WHERE c.user_id = p_session.user_id AND c.status IN ('pending', 'claimed', 'running')) >= quota THEN
        RAISE EXCEPTION 'command queue quota reached (% unfinished commands)', quota
            USING ERRCODE = 'PT429', HINT = 'Wait for commands to finish, or cancel some.';
    END IF;
    UPDATE shell.lanes l SET
        ready_since = CASE WHEN l.pending = 0 AND l.active_command_id IS NULL THEN now() ELSE l.ready_since END,
        pending = l.pending + 1,
        change_seq = l.change_seq + 1
    WHERE l.session_id = p_session.id
    RETURNING l.change_seq INTO seq;
    INSERT INTO shell.commands (session_id, user_id, command, replay_run_id, replay_of_command_id,
                                image_digest, change_seq)
    VALUES (p_session.id, p_session.user_id, p_command, p_replay_run_id, p_replay_of, p_image_digest, seq)
    RETURNING id INTO new_id;
    UPDATE shell.sessions s SET last_active_at = now() WHERE s.id = p_session.id;
    -- A constant payload: PostgreSQL folds identical notifications of one
    -- transaction into one, and executors treat it as a hint to claim.
    PERFORM pg_notify('shell_commands', '');
    RETURN new_id;
END
$$;

CREATE FUNCTION shell_api.create_session(p_name text DEFAULT NULL) RETURNS uuid
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    SELECT shell.new_session((SELECT shell.current_user_id()), p_name, '/home/sandbox', '{}'::jsonb)
$$;

CREATE FUNCTION shell_api.list_sessions()
RETURNS TABLE (id uuid, name text, cwd text, created_at timestamptz, last_active_at timestamptz,
               forked_from_command_id bigint, replay_of_session_id uuid)
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT s.id, s.name, s.cwd, s.created_at, s.last_active_at, s.forked_from_command_id, s.replay_of_session_id
    FROM shell.sessions s
    WHERE s.user_id = (SELECT shell.current_user_id())
    ORDER BY s.last_active_at DESC, s.id
$$;

CREATE FUNCTION shell_api.submit_command(p_session_id uuid, p_command text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
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
    RETURN shell.enqueue(shell.owned_session(p_session_id), p_command);
END
$$;

CREATE FUNCTION shell.check_page(p_since_id bigint, p_limit integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = '' AS $$
BEGIN
    IF p_since_id IS NULL OR p_since_id < 0 THEN
        RAISE EXCEPTION 'p_since_id must be 0 or a command id' USING ERRCODE = '22023';
    END IF;
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 1000' USING ERRCODE = '22023';
    END IF;
END
$$;

-- Output of a finished command is stored whole; a running one's is what has
-- streamed in so far.
CREATE FUNCTION shell.output_of(c shell.commands) RETURNS text
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT coalesce(c.output,
        (SELECT string_agg(o.data, '' ORDER BY o.seq) FROM shell.output_chunks o WHERE o.command_id = c.id),
        '')
$$;

-- Commands after p_since_id, oldest first; with p_since_id = 0, the last
-- p_limit commands.
CREATE FUNCTION shell_api.latest_output(p_session_id uuid, p_since_id bigint DEFAULT 0, p_limit integer DEFAULT 20)
RETURNS TABLE (id bigint, command text, output text, exit_code integer, status text,
               submitted_at timestamptz, started_at timestamptz, completed_at timestamptz)
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
BEGIN
    -- Row-level security alone would only check identity on rows it finds.
    PERFORM shell.current_user_id();
    PERFORM shell.check_page(p_since_id, p_limit);
    IF NOT EXISTS (SELECT FROM shell.sessions s WHERE s.id = p_session_id) THEN
        PERFORM shell.session_not_found();
    END IF;
    RETURN QUERY
    SELECT page.id, page.command, shell.output_of(page), page.exit_code, page.status,
           page.submitted_at, page.started_at, page.completed_at
    FROM (
        (SELECT c.* FROM shell.commands c
         WHERE c.session_id = p_session_id AND p_since_id = 0
         ORDER BY c.id DESC LIMIT p_limit)
        UNION ALL
        (SELECT c.* FROM shell.commands c
         WHERE c.session_id = p_session_id AND p_since_id > 0 AND c.id > p_since_id
         ORDER BY c.id LIMIT p_limit)
    ) page
    ORDER BY page.id;
END
$$;

-- The change cursor: commands whose status or output changed after
-- p_after_change (a change_seq from an earlier answer), oldest first. Poll
-- with the largest change_seq seen; no change is ever skipped.
CREATE FUNCTION shell_api.session_changes(p_session_id uuid, p_after_change bigint DEFAULT 0, p_limit integer DEFAULT 100)
RETURNS TABLE (id bigint, command text, output text, exit_code integer, status text, reason text,
               submitted_at timestamptz, started_at timestamptz, completed_at timestamptz,
               duration_ms integer, change_seq bigint)
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
BEGIN
    PERFORM shell.current_user_id();
    PERFORM shell.check_page(p_after_change, p_limit);
    IF NOT EXISTS (SELECT FROM shell.sessions s WHERE s.id = p_session_id) THEN
        PERFORM shell.session_not_found();
    END IF;
    RETURN QUERY
    SELECT page.id, page.command, shell.output_of(page), page.exit_code, page.status, page.reason,
           page.submitted_at, page.started_at, page.completed_at, page.duration_ms, page.change_seq
    FROM (SELECT c.* FROM shell.commands c
          WHERE c.session_id = p_session_id AND c.change_seq > p_after_change
          ORDER BY c.change_seq LIMIT p_limit) page
    ORDER BY page.id;
END
$$;

-- A pending command is cancelled at once; a claimed or running one is
-- flagged and its executor kills it. Returns false if it had already ended.
CREATE FUNCTION shell_api.cancel_command(p_command_id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target shell.commands := shell.owned_command(p_command_id);
    seq bigint;
BEGIN
    -- Lane first, then command: the lock order every transition follows.
    UPDATE shell.lanes l SET change_seq = l.change_seq + 1
    WHERE l.session_id = target.session_id RETURNING l.change_seq INTO seq;
    SELECT * INTO target FROM shell.commands c WHERE c.id = p_command_id FOR UPDATE;
    IF target.status = 'pending' THEN
        UPDATE shell.commands c SET status = 'cancelled', reason = 'cancelled', completed_at = now(),
            output = '', change_seq = seq
        WHERE c.id = p_command_id;
        PERFORM shell.chain_result(p_command_id);
        UPDATE shell.lanes l SET pending = l.pending - 1 WHERE l.session_id = target.session_id;
        RETURN true;
    ELSIF target.status IN ('claimed', 'running') THEN
        UPDATE shell.commands c SET cancel_requested_at = coalesce(c.cancel_requested_at, now()),
            change_seq = seq
        WHERE c.id = p_command_id;
        PERFORM pg_notify('shell_cancel', p_command_id::text);
        RETURN true;
    END IF;
    RETURN false;
END
$$;

CREATE FUNCTION shell_api.fork_session(p_source_command_id bigint) RETURNS uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    source shell.commands := shell.owned_command(p_source_command_id);
BEGIN
    IF source.cwd_after IS NULL THEN
        RAISE EXCEPTION 'command % has not finished running', p_source_command_id
            USING ERRCODE = '22023', HINT = 'Fork from a command that ran to completion.';
    END IF;
    RETURN shell.new_session(source.user_id, 'fork of command ' || source.id,
                             source.cwd_after, source.env_after, p_forked_from => source.id);
END
$$;

-- Re-queues the session's original commands from p_start_id on, in a new
-- session that starts from the state they started from; its id is the
-- replay run id.
CREATE FUNCTION shell_api.replay_session(p_session_id uuid, p_start_id bigint) RETURNS uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    source shell.sessions := shell.owned_session(p_session_id);
    start shell.commands;
    run_id uuid;
    run_session shell.sessions;
    original shell.commands;
BEGIN
    SELECT * INTO start FROM shell.commands c
    WHERE c.id = p_start_id AND c.session_id = source.id AND c.replay_of_command_id IS NULL;
    IF start.id IS NULL THEN
        RAISE EXCEPTION 'command % is not an original command of this session', p_start_id
            USING ERRCODE = '22023', HINT = 'Pass the id of a command submitted to this session.';
    END IF;
    -- Created first, then read: a volatile call in the WHERE clause would run
    -- once per existing session, and its own row is not visible to that query.
    run_id := shell.new_session(  -- the name is cut to stay within 200 characters
        source.user_id, 'replay of ' || left(coalesce(source.name, source.id::text), 150) || ' from ' || start.id,
        coalesce(start.cwd_before, '/home/sandbox'), coalesce(start.env_before, '{}'::jsonb),
        p_replay_of => source.id);
    SELECT * INTO run_session FROM shell.sessions s WHERE s.id = run_id;
    FOR original IN
        SELECT * FROM shell.commands c
        WHERE c.session_id = source.id AND c.id >= p_start_id AND c.replay_of_command_id IS NULL
        ORDER BY c.id
    LOOP
        PERFORM shell.enqueue(run_session, original.command, run_session.id, original.id, original.image_digest);
    END LOOP;
    RETURN run_session.id;
END
$$;
