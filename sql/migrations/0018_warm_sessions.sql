-- Warm starts for new sessions (DESIGN.md §10). A new session is announced
-- on shell_sessions when its creation commits; one executor adopts it (it
-- becomes the host claiming prefers for the session, as if it held its
-- files) and starts the session's first container before a command exists.

CREATE FUNCTION shell.announce_session() RETURNS trigger
LANGUAGE plpgsql SET search_path = '' AS $$
BEGIN
    PERFORM pg_notify('shell_sessions', NEW.session_id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER lanes_announce AFTER INSERT ON shell.lanes
    FOR EACH ROW EXECUTE FUNCTION shell.announce_session();

-- True for the one executor host that adopts the session: it has no files
-- yet (so every host's copy is as good), no host's copy is preferred yet,
-- and no command of it runs.
CREATE FUNCTION shell.adopt_session(p_session_id uuid, p_host text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    IF p_host IS NULL OR p_host !~ '^[A-Za-z0-9_.:@-]{1,200}$' THEN
        RAISE EXCEPTION 'invalid host %', left(p_host, 200) USING ERRCODE = '22023';
    END IF;
    UPDATE shell.lanes l SET cached_on = p_host
    FROM shell.sessions s
    WHERE l.session_id = p_session_id AND s.id = l.session_id AND l.cached_on IS NULL
      AND l.active_command_id IS NULL AND (s.root IS NULL OR s.root = shell.empty_tree());
    RETURN FOUND;
END
$$;

-- A warm container learns its command only over stdin, so no label names
-- it: the command's row does (mark_created records the container before the
-- hand-over). Reaping asks which of a list of containers ran a command that
-- has ended (their executor may be gone, and the command still running).
CREATE INDEX commands_container ON shell.commands (container_id) WHERE container_id IS NOT NULL;

CREATE FUNCTION shell.ended_containers(p_container_ids text[]) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT c.container_id FROM shell.commands c
    WHERE c.container_id = ANY (p_container_ids) AND c.status NOT IN ('claimed', 'running')
$$;
