-- A host's copies of sessions' files are a cache (DESIGN.md §9): the files
-- are in the database, so an executor host may drop a copy whenever nobody
-- uses it. This migration gives executors (and the cleanup agent) what they
-- need to drop the copies that no longer serve anyone.

-- What the database says about the sessions a host holds copies of: whose
-- they are (a host bounds the copies it keeps per user), whether they are
-- archived (an archived session runs nothing more: its copy goes), and
-- whether their files are stored here (a session from before the workspace
-- has its files only in its copy, which is then never dropped). Sessions
-- the database does not know are not returned: a copy of one is left alone.
CREATE FUNCTION shell.host_sessions(p_session_ids uuid[])
RETURNS TABLE (session_id uuid, user_id uuid, archived boolean, stored boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT s.id, s.user_id, s.archived_at IS NOT NULL, s.root IS NOT NULL
    FROM shell.sessions s
    WHERE s.id = ANY (p_session_ids)
$$;

-- A session with unfinished commands is refused rather than archived with
-- work in flight: cancel them first.
-- As in 0015, and the executors are told (channel shell_archived, the
-- session id): the host that holds its copy removes it at once. The notice
-- is only a hint; executors and the cleanup agent also look for copies of
-- archived sessions on their own, so a copy still goes when no executor
-- was listening.
CREATE OR REPLACE FUNCTION shell_api.archive_session(p_session_id uuid) RETURNS void
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
    PERFORM pg_notify('shell_archived', target.id::text);
END
$$;
