-- What the terminal page needs of sessions and commands: renaming and
-- archiving sessions, their fork and replay lineage, each command's outcome
-- in plain words, and the time limit a running command counts against.

-- ---- archiving -------------------------------------------------------------

-- Sessions are archived, never deleted (DESIGN.md §12): their commands stay
-- in the result chain, so the audit chain stays verifiable. An archived
-- session leaves the list and the quota, and takes no more commands.
ALTER TABLE shell.sessions ADD COLUMN archived_at timestamptz;
CREATE INDEX sessions_user_live ON shell.sessions (user_id) WHERE archived_at IS NULL;

-- As in 0005, but an archived session is "not found" to the calls that
-- change a session (submit, upload, replay from, rename, archive).
CREATE OR REPLACE FUNCTION shell.owned_session(p_session_id uuid) RETURNS shell.sessions
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    -- Identity first: a caller who is nobody gets 42501 whether or not the
    -- id exists, so ids cannot be probed without signing in either.
    me uuid := shell.current_user_id();
    found shell.sessions;
BEGIN
    SELECT * INTO found FROM shell.sessions s
    WHERE s.id = p_session_id AND s.user_id = me AND s.archived_at IS NULL;
    IF found.id IS NULL THEN
        PERFORM shell.session_not_found();
    END IF;
    RETURN found;
END
$$;

-- As in 0005, but only sessions that are not archived count toward the quota.
CREATE OR REPLACE FUNCTION shell.new_session(
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
    IF (SELECT count(*) FROM shell.sessions s
        WHERE s.user_id = p_user_id AND s.archived_at IS NULL) >= quota THEN
        RAISE EXCEPTION 'session quota reached (% sessions)', quota USING ERRCODE = 'PT429',
            HINT = 'Archive sessions you no longer need, or ask an administrator to raise max_sessions.';
    END IF;
    INSERT INTO shell.sessions (user_id, name, cwd, env, forked_from_command_id, replay_of_session_id)
    VALUES (p_user_id, p_name, p_cwd, p_env, p_forked_from, p_replay_of)
    RETURNING id INTO new_id;
    INSERT INTO shell.lanes (session_id, user_id) VALUES (new_id, p_user_id);
    RETURN new_id;
END
$$;

CREATE FUNCTION shell_api.rename_session(p_session_id uuid, p_name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target shell.sessions := shell.owned_session(p_session_id);
    new_name text := btrim(p_name);
BEGIN
    IF new_name IS NULL OR length(new_name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'session name must be 1 to 200 characters' USING ERRCODE = '22023',
            HINT = 'Give the session a name that is not blank.';
    END IF;
    UPDATE shell.sessions s SET name = new_name WHERE s.id = target.id;
END
$$;

-- A session with unfinished commands is refused rather than archived with
-- work in flight: cancel them first.
CREATE FUNCTION shell_api.archive_session(p_session_id uuid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target shell.sessions := shell.owned_session(p_session_id);
BEGIN
    -- The lane lock orders this against a concurrent submit_command.
    PERFORM FROM shell.lanes l WHERE l.session_id = target.id FOR UPDATE;
    IF EXISTS (SELECT FROM shell.commands c
               WHERE c.session_id = target.id AND c.status IN ('pending', 'claimed', 'running')) THEN
        RAISE EXCEPTION 'session has unfinished commands' USING ERRCODE = 'PT409',
            HINT = 'Cancel them or wait for them to finish, then archive the session.';
    END IF;
    UPDATE shell.sessions s SET archived_at = now() WHERE s.id = target.id;
END
$$;

-- As in 0005, without archived sessions, and with where each came from:
-- the session a fork was taken from (forked_from_command_id's session).
-- The page finds the other direction (a session's forks and replays) in
-- the same list.
DROP FUNCTION shell_api.list_sessions();
CREATE FUNCTION shell_api.list_sessions()
RETURNS TABLE (id uuid, name text, cwd text, created_at timestamptz, last_active_at timestamptz,
               forked_from_command_id bigint, replay_of_session_id uuid, forked_from_session_id uuid)
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT s.id, s.name, s.cwd, s.created_at, s.last_active_at, s.forked_from_command_id,
           s.replay_of_session_id, f.session_id
    FROM shell.sessions s
    LEFT JOIN shell.commands f ON f.id = s.forked_from_command_id
    WHERE s.user_id = (SELECT shell.current_user_id()) AND s.archived_at IS NULL
    ORDER BY s.last_active_at DESC, s.id
$$;

-- ---- the time limit ----------------------------------------------------------

-- Executors publish their command time limit when they start, so the page
-- can show a running command's elapsed time against it. With several
-- executors the last one to start wins: the limit is a deployment setting.
CREATE FUNCTION shell.publish_time_limit(p_seconds numeric) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    INSERT INTO shell.config (key, value) VALUES ('command_time_limit_s', p_seconds::text)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value
$$;

CREATE FUNCTION shell.time_limit_s() RETURNS numeric
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT value::numeric FROM shell.config WHERE key = 'command_time_limit_s'
$$;

-- {"time_limit_s": 30} (null before any executor has started).
CREATE FUNCTION shell_api.command_limits() RETURNS json
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
BEGIN
    PERFORM shell.current_user_id();  -- for signed-in tenants, like every call
    RETURN json_build_object('time_limit_s', shell.time_limit_s());
END
$$;

-- ---- a command's outcome in plain words ----------------------------------------

-- 'ok', 'running', 'failed' or 'cancelled': the page colours by it.
CREATE FUNCTION shell.outcome_class(c shell.commands) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT CASE
        WHEN c.status IN ('pending', 'claimed', 'running') THEN 'running'
        WHEN c.status = 'cancelled' OR c.reason = 'cancelled' THEN 'cancelled'
        WHEN c.status = 'done' AND c.exit_code = 0 THEN 'ok'
        ELSE 'failed' END
$$;

-- What happened, as a person would say it: "done · exit 0 · 12 ms",
-- "exit 127: command not found · 3 ms", "timed out: stopped at the 30 s
-- time limit", "out of memory: stopped at the memory limit".
CREATE FUNCTION shell.outcome_words(c shell.commands, p_limit_s numeric) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT concat_ws(' · ',
        CASE
            WHEN c.status = 'pending' THEN 'waiting to run'
            WHEN c.status IN ('claimed', 'running') THEN 'running'
            WHEN c.reason = 'timeout' THEN 'timed out: stopped at the '
                || coalesce(trim_scale(p_limit_s) || ' s ', '') || 'time limit'
            WHEN c.reason = 'oom' THEN 'out of memory: stopped at the memory limit'
            WHEN c.status = 'cancelled' OR c.reason = 'cancelled' THEN 'cancelled'
            WHEN c.status = 'done' AND c.exit_code = 0 THEN 'done · exit 0'
            WHEN c.reason IS NOT NULL THEN 'failed: ' || c.reason
            ELSE 'exit ' || c.exit_code || CASE
                WHEN c.exit_code = 127 THEN ': command not found'
                WHEN c.exit_code = 126 THEN ': not executable'
                WHEN c.exit_code = 130 THEN ': interrupted'
                WHEN c.exit_code > 128 THEN ': killed by signal ' || (c.exit_code - 128)
                ELSE ': failed' END
        END,
        c.duration_ms || ' ms',
        CASE WHEN c.truncated THEN 'output truncated' END)
$$;

-- "~/d" for /home/sandbox/d: the prompt a person expects.
CREATE FUNCTION shell.short_cwd(p_cwd text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT CASE
        WHEN p_cwd = '/home/sandbox' THEN '~'
        WHEN p_cwd LIKE '/home/sandbox/%' THEN '~' || substr(p_cwd, length('/home/sandbox') + 1)
        ELSE p_cwd END
$$;

-- The buttons beside a command: cancel while it is unfinished; fork from
-- it and replay from it once it has ended (replay only from a command typed
-- into this session, as replay_session requires).
CREATE FUNCTION shell.command_buttons(c shell.commands) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT CASE
        WHEN c.status IN ('pending', 'claimed', 'running')
        THEN format('<button type="button" class="cancel" data-cancel="%s">cancel</button>', c.id)
        ELSE format('<button type="button" class="fork" data-fork="%s">fork from here</button>', c.id)
             || CASE WHEN c.replay_of_command_id IS NULL
                     THEN format('<button type="button" class="replay" data-replay="%s">replay from here</button>',
                                 c.id)
                     ELSE '' END
        END
$$;

-- One command as the terminal shows it (as in 0012), now with its outcome
-- class and words, for a running command when it started and the time
-- limit (the page counts the elapsed time without asking again), and for
-- a finished one the directory it left the session in (the next prompt).
CREATE OR REPLACE FUNCTION shell.render_command(c shell.commands) RETURNS text
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT format(
        '<article class="cmd%s" id="cmd-%s" data-id="%s" data-status="%s" data-change="%s" '
        'data-outcome="%s"%s%s>'
        '<div class="line"><span class="prompt">%s $</span> <span class="text">%s</span>'
        '<span class="actions">%s</span></div>'
        '<pre class="out">%s</pre><div class="meta">%s</div>%s</article>',
        CASE WHEN c.upload IS NOT NULL THEN ' upload' ELSE '' END,
        c.id, c.id, c.status, c.change_seq, shell.outcome_class(c),
        CASE WHEN c.status = 'running' AND c.started_at IS NOT NULL
             THEN format(' data-started="%s"%s',
                         floor(extract(epoch FROM c.started_at) * 1000)::bigint,
                         coalesce(format(' data-limit="%s"', trim_scale(shell.time_limit_s())), ''))
             ELSE '' END,
        CASE WHEN c.cwd_after IS NOT NULL
             THEN format(' data-cwd="%s"', shell.html_escape(shell.short_cwd(c.cwd_after))) ELSE '' END,
        shell.html_escape(shell.short_cwd(coalesce(c.cwd_before, ''))), shell.html_escape(c.command),
        shell.command_buttons(c),
        shell.ansi_html(shell.output_of(c)),
        shell.html_escape(shell.outcome_words(c, shell.time_limit_s())),
        shell.render_changes(c))
$$;
