-- Live updates and the terminal's HTML.

-- PostgREST answers a function returning this domain as a raw HTML body.
CREATE DOMAIN shell_api."text/html" AS text;

CREATE FUNCTION shell.html_escape(t text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT replace(replace(replace(replace(replace(coalesce(t, ''),
        '&', '&amp;'), '<', '&lt;'), '>', '&gt;'), '"', '&quot;'), '''', '&#39;')
$$;

-- Every change to a session's commands bumps its lane's change_seq; tell
-- listeners (the gateway's one LISTEN connection) which session changed.
-- Identical notifications of one transaction are folded into one.
CREATE FUNCTION shell.notify_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = '' AS $$
BEGIN
    PERFORM pg_notify('shell_changes', NEW.session_id::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER lanes_notify_change AFTER UPDATE OF change_seq ON shell.lanes
    FOR EACH ROW WHEN (NEW.change_seq IS DISTINCT FROM OLD.change_seq)
    EXECUTE FUNCTION shell.notify_change();

-- Output with ANSI SGR colours as escaped text in styled spans (classes, so
-- the page's Content-Security-Policy needs no inline styles). Other escape
-- sequences are dropped.
CREATE FUNCTION shell.ansi_html(t text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = '' AS $$
DECLARE
    sgr constant text := E'\x1b\\[([0-9;]*)m';
    other_escapes constant text := E'\x1b(\\[[0-9;?]*[ -/]*[@-~]|\\][^\x07\x1b]*(\x07|\x1b\\\\)?|.)?';
    parts text[];
    codes text[];
    html text := '';
    fg text := '';
    bg text := '';
    bold boolean := false;
    classes text;
    segment text;
    code text;
    n integer;
BEGIN
    IF t IS NULL OR t = '' THEN
        RETURN '';
    END IF;
    IF strpos(t, E'\x1b') = 0 THEN
        RETURN shell.html_escape(t);
    END IF;
    -- Building the spans costs more than linear time: past 64 KiB the
    -- output is shown without colours, so no output can tie up the server.
    IF octet_length(t) > 65536 THEN
        RETURN shell.html_escape(regexp_replace(t, other_escapes, '', 'g'));
    END IF;
    parts := regexp_split_to_array(t, sgr);
    codes := ARRAY(SELECT m[1] FROM regexp_matches(t, sgr, 'g') AS m);
    FOR i IN 1 .. array_length(parts, 1) LOOP
        segment := regexp_replace(parts[i], other_escapes, '', 'g');
        IF segment <> '' THEN
            classes := concat_ws(' ', nullif(fg, ''), nullif(bg, ''), CASE WHEN bold THEN 'ansi-bold' END);
            html := html || CASE WHEN classes = '' THEN shell.html_escape(segment)
                                 ELSE format('<span class="%s">%s</span>', classes, shell.html_escape(segment)) END;
        END IF;
        CONTINUE WHEN i > coalesce(array_length(codes, 1), 0);
        FOREACH code IN ARRAY string_to_array(CASE WHEN codes[i] = '' THEN '0' ELSE codes[i] END, ';') LOOP
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
    RETURN html;
END
$$;

-- One command as the terminal shows it; data-change lets the page keep
-- its change cursor.
CREATE FUNCTION shell.render_command(c shell.commands) RETURNS text
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT format(
        '<article class="cmd" id="cmd-%s" data-id="%s" data-status="%s" data-change="%s">'
        '<div class="line"><span class="prompt">%s $</span> <span class="text">%s</span>%s</div>'
        '<pre class="out">%s</pre><div class="meta">%s</div></article>',
        c.id, c.id, c.status, c.change_seq,
        shell.html_escape(coalesce(c.cwd_before, '')), shell.html_escape(c.command),
        CASE WHEN c.status IN ('pending', 'claimed', 'running')
             THEN format('<button type="button" class="cancel" data-cancel="%s">cancel</button>', c.id)
             ELSE format('<button type="button" class="fork" data-fork="%s">fork from here</button>', c.id) END,
        shell.ansi_html(shell.output_of(c)),
        shell.html_escape(concat_ws(' · ', c.status,
            'exit ' || c.exit_code, c.reason, c.duration_ms || ' ms',
            CASE WHEN c.truncated THEN 'output truncated' END)))
$$;

-- Where a client starts following a session: changes after this cursor
-- are the ones it has not seen.
CREATE FUNCTION shell_api.session_cursor(p_session_id uuid) RETURNS bigint
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
BEGIN
    PERFORM shell.current_user_id();
    IF NOT EXISTS (SELECT FROM shell.sessions s WHERE s.id = p_session_id) THEN
        PERFORM shell.session_not_found();
    END IF;
    RETURN coalesce((SELECT max(c.change_seq) FROM shell.commands c WHERE c.session_id = p_session_id), 0);
END
$$;

CREATE FUNCTION shell_api.session_changes_html(p_session_id uuid, p_after_change bigint DEFAULT 0,
                                               p_limit integer DEFAULT 100)
RETURNS shell_api."text/html"
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT coalesce(string_agg(shell.render_command(c), E'\n' ORDER BY c.id), '')
    FROM shell_api.session_changes(p_session_id, p_after_change, p_limit) ch
    JOIN shell.commands c ON c.id = ch.id
$$;

CREATE FUNCTION shell_api.latest_output_html(p_session_id uuid, p_since_id bigint DEFAULT 0,
                                                        p_limit integer DEFAULT 20)
RETURNS shell_api."text/html"
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT coalesce(string_agg(shell.render_command(c), E'\n' ORDER BY c.id), '')
    FROM shell_api.latest_output(p_session_id, p_since_id, p_limit) o
    JOIN shell.commands c ON c.id = o.id
$$;

CREATE FUNCTION shell_api.submit_command_html(p_session_id uuid, p_command text)
RETURNS shell_api."text/html"
LANGUAGE plpgsql SET search_path = '' AS $$
DECLARE
    new_id bigint := shell_api.submit_command(p_session_id, p_command);
BEGIN
    RETURN (SELECT shell.render_command(c) FROM shell.commands c WHERE c.id = new_id);
END
$$;

