-- Warm starts for sessions a client opens (DESIGN.md §10): the page calls
-- warm_session when it shows a session, and the executor that claiming
-- prefers for it starts its next container before anything is typed.

-- warm_wanted: a warm start was asked for (the session is new, or a client
-- opened it) and no executor has taken the request yet. Several executors
-- may share the preferred host; exactly one takes it. New sessions are born
-- wanting one; sessions from before this migration are not.
-- warm_asked_at: when a client last asked, for warm_session's limits.
ALTER TABLE shell.lanes ADD COLUMN warm_wanted boolean NOT NULL DEFAULT false,
                        ADD COLUMN warm_asked_at timestamptz;
ALTER TABLE shell.lanes ALTER COLUMN warm_wanted SET DEFAULT true;
CREATE INDEX lanes_warm_asked ON shell.lanes (user_id, warm_asked_at)
    WHERE warm_asked_at IS NOT NULL;

-- True for the one executor that takes the request: of the host claiming
-- already prefers for the session, or, when none is preferred, the first to
-- ask, which becomes that host. A session whose files are in the database
-- (root not NULL) can be restored on any host; a session from before the
-- workspace (root NULL) has its files only where its volume is, so it is
-- never moved by this. Nothing is taken while a command of it runs.
CREATE OR REPLACE FUNCTION shell.adopt_session(p_session_id uuid, p_host text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    IF p_host IS NULL OR p_host !~ '^[A-Za-z0-9_.:@-]{1,200}$' THEN
        RAISE EXCEPTION 'invalid host %', left(p_host, 200) USING ERRCODE = '22023';
    END IF;
    UPDATE shell.lanes l SET cached_on = p_host, warm_wanted = false
    FROM shell.sessions s
    WHERE l.session_id = p_session_id AND s.id = l.session_id AND l.warm_wanted
      AND (l.cached_on IS NULL OR l.cached_on = p_host)
      AND l.active_command_id IS NULL AND s.root IS NOT NULL AND s.archived_at IS NULL;
    RETURN FOUND;
END
$$;

-- Announced only while the session is idle (a busy session's next container
-- is started when its command completes), at most every 5 s per session,
-- and for at most 3 sessions of a user a minute: a person opens one session
-- at a time, and the executors' warm pools are shared by every tenant, so
-- no tenant can keep them full by asking. Beyond that the call does nothing;
-- the session's next command just starts its own container.
CREATE FUNCTION shell_api.warm_session(p_session_id uuid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target shell.sessions := shell.owned_session(p_session_id);
BEGIN
    IF (SELECT count(*) FROM shell.lanes l
        WHERE l.user_id = target.user_id AND l.session_id <> target.id
          AND l.warm_asked_at > now() - interval '1 minute') >= 3 THEN
        RETURN;
    END IF;
    UPDATE shell.lanes l SET warm_wanted = true, warm_asked_at = now()
    WHERE l.session_id = target.id AND l.pending = 0 AND l.active_command_id IS NULL
      AND (l.warm_asked_at IS NULL OR l.warm_asked_at < now() - interval '5 seconds');
    IF FOUND THEN
        PERFORM pg_notify('shell_sessions', target.id::text);
    END IF;
END
$$;
