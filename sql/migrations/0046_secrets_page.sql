-- The page's secrets (0045_secrets) as HTML, like its other lists: the
-- secrets view lists the caller's secrets by name, never a value, and a
-- checkbox each lets the "new session" form and an open session choose the
-- ones their commands get.

-- Each secret with its version, when it was set (UTC: the page shows it in
-- the reader's time) and how many sessions use it (a delete makes their
-- next command fail), and a delete button.
CREATE FUNCTION shell_api.secrets_html() RETURNS shell_api."text/html"
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT coalesce(string_agg(format(
        '<li data-name="%s"><span class="name">%s</span>'
        '<span class="info">version %s · set <time datetime="%s">%s</time>%s</span>'
        '<span class="actions"><button type="button" class="delete" aria-label="delete %s">delete</button>'
        '</span></li>',
        shell.html_escape(s.name), shell.html_escape(s.name), s.version,
        to_char(s.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
        to_char(s.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"'),
        CASE used.sessions WHEN 0 THEN '' WHEN 1 THEN ' · used by 1 session'
                           ELSE format(' · used by %s sessions', used.sessions) END,
        shell.html_escape(s.name)), E'\n' ORDER BY s.name),
        '<li class="empty">No secrets yet.</li>')
    FROM shell_api.list_secrets() s
    CROSS JOIN LATERAL (SELECT count(*) AS sessions FROM shell.sessions x
                        WHERE x.user_id = shell.current_user_id() AND x.archived_at IS NULL
                          AND s.name = ANY (x.secrets)) used
$$;
COMMENT ON FUNCTION shell_api.secrets_html() IS
    'The page''s secrets view as HTML: list_secrets'' secrets by name, each an <li data-name> with its version, '
    'when it was set (UTC), how many sessions use it and a delete button; "No secrets yet." for none. Never a '
    'value. 42501 when not signed in.';

-- A checkbox (name p_secrets) per secret of the caller, checked for those
-- the session names; a name the session keeps after its secret was deleted
-- is there too, checked and marked "not set" (its next command fails until
-- it is set again or unchecked). Empty when there is nothing to choose.
CREATE FUNCTION shell_api.secret_choices_html(p_session_id uuid DEFAULT NULL) RETURNS shell_api."text/html"
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    chosen text[] := CASE WHEN p_session_id IS NULL THEN '{}'::text[]
                          ELSE (shell.readable_session(p_session_id)).secrets END;
BEGIN
    RETURN coalesce((
        WITH mine AS (SELECT l.name FROM shell_api.list_secrets() l)
        SELECT string_agg(format(
            '<label class="secret-choice%s"><input type="checkbox" name="p_secrets" value="%s"%s> %s%s</label>',
            CASE WHEN c.is_set THEN '' ELSE ' unset' END, shell.html_escape(c.name),
            CASE WHEN c.name = ANY (chosen) THEN ' checked' ELSE '' END, shell.html_escape(c.name),
            CASE WHEN c.is_set THEN '' ELSE ' <span class="note">not set</span>' END), E'\n' ORDER BY c.name)
        FROM (SELECT m.name, true FROM mine m
              UNION ALL
              SELECT n, false FROM unnest(chosen) n WHERE n NOT IN (SELECT m.name FROM mine m)) c(name, is_set)),
        '');
END
$$;
COMMENT ON FUNCTION shell_api.secret_choices_html(p_session_id uuid) IS
    'The secrets a session may use, as the page''s checkboxes (name p_secrets): one per secret of the caller, '
    'checked for those the session p_session_id names (none without one), plus each name it keeps whose '
    'secret was deleted, checked and marked "not set"; empty when there are none. readable_session''s errors.';
