-- Warm starts for sessions a client opens (DESIGN.md §10): the page calls
-- warm_session when it shows a session, and the executor that claiming
-- prefers for it starts its next container before anything is typed.

-- True for the one executor host that warms the session: the host claiming
-- already prefers for it, or, when none is preferred, the first to ask,
-- which becomes that host. A session whose files are in the database (root
-- not NULL) can be restored on any host; a session from before the
-- workspace (root NULL) has its files only where its volume is, so it is
-- never moved by this. Nothing is adopted while a command of it runs.
CREATE OR REPLACE FUNCTION shell.adopt_session(p_session_id uuid, p_host text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    IF p_host IS NULL OR p_host !~ '^[A-Za-z0-9_.:@-]{1,200}$' THEN
        RAISE EXCEPTION 'invalid host %', left(p_host, 200) USING ERRCODE = '22023';
    END IF;
    UPDATE shell.lanes l SET cached_on = p_host
    FROM shell.sessions s
    WHERE l.session_id = p_session_id AND s.id = l.session_id
      AND (l.cached_on IS NULL OR l.cached_on = p_host)
      AND l.active_command_id IS NULL AND s.root IS NOT NULL AND s.archived_at IS NULL;
    RETURN FOUND;
END
$$;

-- Announced only while the session is idle: a busy session's next container
-- is started when its command completes. Calling it again is harmless (an
-- executor holding the session's container ignores the announcement).
CREATE FUNCTION shell_api.warm_session(p_session_id uuid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target shell.sessions := shell.owned_session(p_session_id);
BEGIN
    IF EXISTS (SELECT FROM shell.lanes l
               WHERE l.session_id = target.id AND l.pending = 0 AND l.active_command_id IS NULL) THEN
        PERFORM pg_notify('shell_sessions', target.id::text);
    END IF;
END
$$;
