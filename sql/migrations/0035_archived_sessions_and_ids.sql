-- An archived session can be read at its link and restored; command ids are
-- shown where fork and replay need them; a replay comparison's rows still
-- to run are shown as pending, not as differing.
-- 1. shell.readable_session: the caller's session, archived or not.
--    owned_session (every function that changes a session or runs in it)
--    answers an archived one with PT409 and how to restore it, no longer
--    "session not found"; root_at (its files) and session_lineage_html read
--    an archived one; warm_session does nothing for one.
-- 2. shell_api.unarchive_session, within max_sessions as creating one is.
-- 3. session_link links an archived session too, marked.
-- 4. command_buttons: the command's id, a button that copies it.
-- 5. replay_comparison_html: data-same="pending" for a row still to run.

-- 1. ---------------------------------------------------------------------------------

CREATE FUNCTION shell.readable_session(p_session_id uuid) RETURNS shell.sessions
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    -- Identity first: a caller who is nobody gets 42501 whether or not the
    -- id exists, so ids cannot be probed without signing in either.
    me uuid := shell.current_user_id();
    found shell.sessions;
BEGIN
    SELECT * INTO found FROM shell.sessions s WHERE s.id = p_session_id AND s.user_id = me;
    IF found.id IS NULL THEN
        PERFORM shell.session_not_found();
    END IF;
    RETURN found;
END
$$;
COMMENT ON FUNCTION shell.readable_session(uuid) IS
    'The caller''s session, archived or not; else session not found (22023), or 42501 when nobody is signed in.';

CREATE OR REPLACE FUNCTION shell.owned_session(p_session_id uuid) RETURNS shell.sessions
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    found shell.sessions := shell.readable_session(p_session_id);
BEGIN
    IF found.archived_at IS NOT NULL THEN
        RAISE EXCEPTION 'session is archived' USING ERRCODE = 'PT409',
            HINT = 'Restore it with unarchive_session to run commands in it or change it.';
    END IF;
    RETURN found;
END
$$;
COMMENT ON FUNCTION shell.owned_session(uuid) IS
    'The caller''s session, to change or run commands in: PT409 when it is archived; else readable_session''s errors.';

CREATE OR REPLACE FUNCTION shell.root_at(p_session_id uuid, p_command_id bigint) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    s shell.sessions := shell.readable_session(p_session_id);
    c shell.commands;
BEGIN
    IF p_command_id IS NULL THEN
        RETURN coalesce(s.root, shell.empty_tree());
    END IF;
    c := shell.owned_command(p_command_id);
    IF c.session_id <> s.id THEN
        PERFORM shell.command_not_found();
    END IF;
    IF c.status NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'command % has not finished', p_command_id USING ERRCODE = '22023',
            HINT = 'Ask again when it has completed, or leave p_command_id out for the files now.';
    END IF;
    RETURN coalesce(c.root_after, c.root_before, shell.empty_tree());
END
$$;
COMMENT ON FUNCTION shell.root_at(uuid, bigint) IS
    'The root of the caller''s session (archived too) now, or right after its command p_command_id. 22023 for an unknown session or command, or one not finished.';

CREATE OR REPLACE FUNCTION shell_api.session_lineage_html(p_session_id uuid) RETURNS shell_api."text/html"
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    me uuid := shell.current_user_id();
    s shell.sessions;
BEGIN
    SELECT * INTO s FROM shell.sessions x WHERE x.id = p_session_id AND x.user_id = me;
    IF s.id IS NULL THEN
        PERFORM shell.session_not_found();
    END IF;
    RETURN array_to_string(
        CASE WHEN s.archived_at IS NOT NULL THEN ARRAY[format(
            '<span class="archived">archived <time datetime="%s">%s</time>: read only</span> '
            '<button type="button" class="unarchive" data-unarchive="%s">restore</button>',
            to_char(s.archived_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
            to_char(s.archived_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"'), s.id)]
        ELSE '{}'::text[] END || shell.render_lineage(s), ' · ');
END
$$;
COMMENT ON FUNCTION shell_api.session_lineage_html(uuid) IS
    'The line shown above an open session, as HTML: for an archived one, since when and a restore button; then shell.render_lineage''s parts, " · " between them; empty for a live session with no lineage. 22023 "session not found" for an unknown or other tenant''s session.';

CREATE OR REPLACE FUNCTION shell_api.warm_session(p_session_id uuid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target shell.sessions := shell.readable_session(p_session_id);
BEGIN
    IF target.archived_at IS NOT NULL OR (SELECT count(*) FROM shell.lanes l
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
COMMENT ON FUNCTION shell_api.warm_session(uuid) IS
    'Called when the page shows a session: asks an executor to start its next container before anything is typed. Does nothing for an archived or busy session, within 5 s of the last ask, or when 3 other sessions of the user asked within a minute; 22023 for an unknown session.';

-- 2. ---------------------------------------------------------------------------------

CREATE FUNCTION shell_api.unarchive_session(p_session_id uuid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target shell.sessions := shell.readable_session(p_session_id);
    quota integer;
BEGIN
    IF target.archived_at IS NULL THEN
        RETURN;
    END IF;
    -- The user's row lock, as new_session takes it: the count cannot be
    -- raced past the quota by a session created at the same time.
    SELECT u.max_sessions INTO quota FROM shell.users u WHERE u.id = target.user_id FOR NO KEY UPDATE;
    IF (SELECT count(*) FROM shell.sessions s
        WHERE s.user_id = target.user_id AND s.archived_at IS NULL) >= quota THEN
        RAISE EXCEPTION 'session quota reached (% sessions)', quota USING ERRCODE = 'PT429',
            HINT = 'Archive a session you no longer need first, or ask an administrator to raise max_sessions.';
    END IF;
    UPDATE shell.sessions s SET archived_at = NULL WHERE s.id = target.id;
END
$$;
COMMENT ON FUNCTION shell_api.unarchive_session(uuid) IS
    'Restores an archived session: it is listed again, counts against max_sessions and takes commands (its files come back from the database with the first). Nothing for a session that is not archived; PT429 at the quota, 22023 for an unknown session.';

-- 3. ---------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION shell.session_link(p_session_id uuid) RETURNS text
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT coalesce(
        (SELECT format('<a href="#session=%s">%s</a>%s', s.id,
                       shell.html_escape(coalesce(nullif(s.name, ''), s.id::text)),
                       CASE WHEN s.archived_at IS NOT NULL THEN ' <span class="gone">(archived)</span>'
                            ELSE '' END)
         FROM shell.sessions s
         WHERE s.id = p_session_id AND s.user_id = (SELECT shell.current_user_id())),
        '<span class="gone">a session that is gone</span>')
$$;
COMMENT ON FUNCTION shell.session_link(uuid) IS
    'A link to one of the caller''s sessions by name (an archived one marked so), for lineage and comparison HTML.';

-- 4. ---------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION shell.command_buttons(c shell.commands) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT format('<button type="button" class="copy-id" data-copy="%s" title="copy the command id">#%s</button>',
                  c.id, c.id)
        || CASE
        WHEN c.status IN ('pending', 'claimed', 'running')
        THEN format('<button type="button" class="cancel" data-cancel="%s">cancel</button>', c.id)
        ELSE format('<button type="button" class="fork" data-fork="%s">fork from here</button>', c.id)
             || CASE WHEN c.replay_of_command_id IS NULL
                     THEN format('<button type="button" class="replay" data-replay="%s">replay from here</button>',
                                 c.id)
                     ELSE '' END
        END
$$;
COMMENT ON FUNCTION shell.command_buttons(shell.commands) IS
    'The buttons beside a command in the page: its id (copied on click); cancel while it is unfinished; once it ended, fork, and replay for a command typed into this session.';

-- 5. ---------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION shell_api.replay_comparison_html(p_run_id uuid) RETURNS shell_api."text/html"
LANGUAGE plpgsql STABLE SET search_path = '' AS $_$
DECLARE
    run shell.sessions;
    total integer;
    same integer;
    running integer;
    rows text;
BEGIN
    WITH r AS (
        SELECT c.*, c.replay_status IN ('done', 'failed', 'cancelled') AS finished,
               c.original_exit_code IS NOT DISTINCT FROM c.replay_exit_code
               AND c.original_output IS NOT DISTINCT FROM c.replay_output AS same_result,
               row_number() OVER () AS n
        FROM shell_api.replay_comparison(p_run_id) c
    )
    SELECT count(*), count(*) FILTER (WHERE r.same_result), count(*) FILTER (WHERE NOT r.finished),
           string_agg(format(
               '<article class="compare-row" data-same="%s"><div class="command">$ %s</div>%s%s</article>',
               CASE WHEN r.finished THEN r.same_result::text ELSE 'pending' END,
               shell.html_escape(r.command),
               shell.compare_side('original', r.original_status, r.original_exit_code, r.original_output,
                                  CASE WHEN r.finished THEN r.replay_exit_code ELSE r.original_exit_code END,
                                  CASE WHEN r.finished THEN r.replay_output ELSE r.original_output END),
               CASE WHEN r.finished
                    THEN shell.compare_side('replay', r.replay_status, r.replay_exit_code, r.replay_output,
                                            r.original_exit_code, r.original_output)
                    ELSE format('<div class="side"><span class="label">replay</span> %s…</div>',
                                shell.html_escape(r.replay_status)) END),
               '' ORDER BY r.n)
    INTO total, same, running, rows
    FROM r;
    SELECT * INTO run FROM shell.sessions s WHERE s.id = p_run_id;  -- replay_comparison found it
    RETURN format(
        '<p id="compare-title" class="compare-title">Replay <a href="#session=%s">%s</a>'
        ' beside the original %s</p>'
        '<p id="compare-summary" class="compare-summary" role="status">%s of %s commands gave the same result%s</p>'
        '<div id="compare-rows" class="compare-rows" data-running="%s">%s</div>',
        run.id, shell.html_escape(coalesce(nullif(run.name, ''), run.id::text)),
        shell.session_link(run.replay_of_session_id),
        same, total, CASE WHEN running > 0 THEN format(' · %s still to run', running) ELSE '' END,
        running, coalesce(rows, ''));
END
$_$;

COMMENT ON FUNCTION shell_api.replay_comparison_html(uuid) IS
    'replay_comparison as the page''s HTML: a title linking the run and its original, how many commands gave the same result, and a row a command, data-same true, false (what differs marked) or pending (still to run); data-running counts the replayed commands still to finish. replay_comparison''s errors.';
