-- The page's views as text/html functions (issue 22), as PostgREST's htmx
-- guide has them: the session list, the lineage above an open session, the
-- files panel and a replay's comparison are rendered here and swapped in by
-- htmx (html/index.html's hx-* attributes), as the scrollback's commands
-- already are (render_command). The JSON functions they stand beside stay:
-- the CLI and API clients read those.
--
-- Each function asks its JSON sibling, or the same helpers, so its tenant
-- rules are that sibling's: nobody signed in gets 42501 first, another
-- tenant's id is "session not found" (22023) exactly as a made-up one.
-- Everything a tenant typed (names, paths, commands, output) goes through
-- shell.html_escape; ids are uuids and numbers, safe as they are.

-- One of the caller's sessions as a link (its name, else its id), or words
-- for one that is archived: the list and its lineage name no other.
CREATE FUNCTION shell.session_link(p_session_id uuid) RETURNS text
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT coalesce(
        (SELECT format('<a href="#session=%s">%s</a>', s.id,
                       shell.html_escape(coalesce(nullif(s.name, ''), s.id::text)))
         FROM shell.sessions s
         WHERE s.id = p_session_id AND s.user_id = (SELECT shell.current_user_id())
           AND s.archived_at IS NULL),
        '<span class="gone">an archived session</span>')
$$;

-- Where a session came from and what came from it, one part each: "fork of
-- X at command N", "replay of X · compare", "forks: …", "replays: … (compare)".
-- Its children are listed in the list's order (most recently active first).
CREATE FUNCTION shell.render_lineage(s shell.sessions) RETURNS text[]
LANGUAGE sql STABLE SET search_path = '' AS $$
    WITH mine AS (
        SELECT x.id, x.last_active_at, x.replay_of_session_id, f.session_id AS forked_from_session_id
        FROM shell.sessions x
        LEFT JOIN shell.commands f ON f.id = x.forked_from_command_id
        WHERE x.user_id = (SELECT shell.current_user_id()) AND x.archived_at IS NULL
    )
    SELECT array_remove(ARRAY[
        (SELECT format('<span class="origin">fork of %s at command %s</span>',
                       shell.session_link(f.session_id), s.forked_from_command_id)
         FROM shell.commands f WHERE f.id = s.forked_from_command_id),
        CASE WHEN s.replay_of_session_id IS NOT NULL THEN
            format('<span class="origin">replay of %s · <a href="#replay=%s">compare</a></span>',
                   shell.session_link(s.replay_of_session_id), s.id) END,
        (SELECT '<span class="children">forks: '
                || string_agg(shell.session_link(m.id), ', ' ORDER BY m.last_active_at DESC, m.id)
                || '</span>'
         FROM mine m WHERE m.forked_from_session_id = s.id),
        (SELECT '<span class="children">replays: '
                || string_agg(format('%s (<a href="#replay=%s">compare</a>)', shell.session_link(m.id), m.id),
                              ', ' ORDER BY m.last_active_at DESC, m.id)
                || '</span>'
         FROM mine m WHERE m.replay_of_session_id = s.id)
    ], NULL)
$$;

-- The session list (list_sessions' sessions and order): each with its
-- directory, when it was last active (UTC here; the page shows it in the
-- reader's time zone), its lineage, and rename and archive buttons.
CREATE FUNCTION shell_api.sessions_html() RETURNS shell_api."text/html"
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    me uuid := shell.current_user_id();
BEGIN
    RETURN coalesce(
        (SELECT string_agg(format(
            '<li data-id="%s"><a href="#session=%s" class="name">%s</a>'
            '<span class="info">%s · <time datetime="%s">%s</time></span>%s'
            '<span class="actions"><button type="button" class="rename">rename</button>'
            '<button type="button" class="archive">archive</button></span></li>',
            s.id, s.id, shell.html_escape(coalesce(nullif(s.name, ''), s.id::text)),
            shell.html_escape(s.cwd),
            to_char(s.last_active_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
            to_char(s.last_active_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"'),
            array_to_string(shell.render_lineage(s), '')),
            E'\n' ORDER BY s.last_active_at DESC, s.id)
         FROM shell.sessions s
         WHERE s.user_id = me AND s.archived_at IS NULL),
        '<li class="empty">No sessions yet.</li>');
END
$$;

-- The lineage above an open session: its parts, " · " between them; empty
-- for a session with none.
CREATE FUNCTION shell_api.session_lineage_html(p_session_id uuid) RETURNS shell_api."text/html"
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    me uuid := shell.current_user_id();
    s shell.sessions;
BEGIN
    SELECT * INTO s FROM shell.sessions x
    WHERE x.id = p_session_id AND x.user_id = me AND x.archived_at IS NULL;
    IF s.id IS NULL THEN
        PERFORM shell.session_not_found();
    END IF;
    RETURN array_to_string(shell.render_lineage(s), ' · ');
END
$$;

-- A size as the files panel shows it: bytes below 1 KiB, then KiB … TiB
-- with one decimal below 10.
CREATE FUNCTION shell.size_words(p_bytes bigint) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT CASE WHEN p_bytes < 1024 THEN p_bytes || ' B' ELSE (
        SELECT CASE WHEN v < 10 THEN to_char(v, 'FM990.0') ELSE round(v)::text END || ' ' || unit
        FROM (SELECT p_bytes / 1024.0 ^ e AS v, (ARRAY['KiB', 'MiB', 'GiB', 'TiB'])[e] AS unit
              FROM (SELECT least(4, floor(log(1024, p_bytes::numeric))::integer) AS e) k) x)
    END
$$;

-- The files panel's listing: session_files' first page (1,000 entries, its
-- most), files and links without the directories, each file with a download
-- button (the page fetches its bytes from read_file), and a note when there
-- is nothing to show or more than the page.
CREATE FUNCTION shell_api.session_files_html(p_session_id uuid) RETURNS shell_api."text/html"
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    max_listed constant integer := 1000;
    listed integer;
    shown integer;
    rows text;
BEGIN
    SELECT count(*), count(*) FILTER (WHERE f.kind <> 'dir'),
           string_agg(format(
               '<tr><td class="path">%s</td><td class="size" title="%s bytes">%s</td>'
               '<td class="mode">%s</td><td class="action">%s</td></tr>',
               shell.html_escape(CASE WHEN f.kind = 'symlink' THEN f.path || ' → ' || f.target
                                      ELSE f.path END),
               f.size, CASE WHEN f.kind = 'file' THEN shell.size_words(f.size) ELSE 'link' END,
               lpad(ltrim(concat((f.mode >> 9) & 7, (f.mode >> 6) & 7, (f.mode >> 3) & 7, f.mode & 7),
                          '0'), 3, '0'),  -- octal, as ls -l's digits
               CASE WHEN f.kind = 'file' THEN format(
                   '<button type="button" class="link" data-download="%s" aria-label="download %s">'
                   'download</button>', shell.html_escape(f.path), shell.html_escape(f.path))
                    ELSE '' END),
               '' ORDER BY f.n) FILTER (WHERE f.kind <> 'dir')
    INTO listed, shown, rows
    FROM (SELECT l.*, row_number() OVER () AS n
          FROM shell_api.session_files(p_session_id, p_limit => max_listed) l) f;
    RETURN format(
        '<table class="files-table"><thead><tr><th>path</th><th>size</th><th>mode</th>'
        '<th><span class="visually-hidden">download</span></th></tr></thead>'
        '<tbody id="files-list">%s</tbody></table><p id="files-note" class="files-note">%s</p>',
        coalesce(rows, ''),
        CASE WHEN listed >= max_listed THEN format('The first %s files are shown; there are more.', shown)
             WHEN shown = 0 THEN 'No files yet.' ELSE '' END);
END
$$;

-- One side of a comparison row: its label, its exit (or its status before
-- it has one) and its output, each marked where it differs from the other
-- side's.
CREATE FUNCTION shell.compare_side(p_label text, p_status text, p_exit_code integer, p_output text,
                                   p_other_exit_code integer, p_other_output text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT format('<div class="side"><span class="label">%s</span> <span class="exit%s">%s</span>'
                  '<pre class="out%s">%s</pre></div>',
                  p_label,
                  CASE WHEN p_exit_code IS DISTINCT FROM p_other_exit_code THEN ' differs' ELSE '' END,
                  CASE WHEN p_exit_code IS NULL THEN shell.html_escape(p_status)
                       ELSE 'exit ' || p_exit_code END,
                  CASE WHEN coalesce(p_output, '') <> coalesce(p_other_output, '') THEN ' differs' ELSE '' END,
                  shell.html_escape(p_output))
$$;

-- A replay beside its original (replay_comparison's rows): a title linking
-- both sessions, how many commands gave the same result, and a row per
-- command with each side's exit and output, what differs marked. The rows'
-- data-running says how many replayed commands are still to finish: the
-- page reads the comparison again while it is not 0.
CREATE FUNCTION shell_api.replay_comparison_html(p_run_id uuid) RETURNS shell_api."text/html"
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
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
               (r.finished AND r.same_result)::text, shell.html_escape(r.command),
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
$$;

COMMENT ON FUNCTION shell.session_link(uuid) IS
    'One of the caller''s sessions as an HTML link to it (its name, else its id, escaped); words saying it is '
    'archived for one that is archived or not the caller''s.';
COMMENT ON FUNCTION shell.render_lineage(shell.sessions) IS
    'Where a session came from and what came from it, as HTML parts: "fork of X at command N", "replay of X · '
    'compare", "forks: …", "replays: … (compare)"; the caller''s sessions only, children most recently active '
    'first.';
COMMENT ON FUNCTION shell_api.sessions_html() IS
    'The page''s session list as HTML: list_sessions'' sessions in its order, each an <li data-id> with its '
    'name, directory, last activity (UTC), lineage and rename and archive buttons; "No sessions yet." for none. '
    '42501 when not signed in.';
COMMENT ON FUNCTION shell_api.session_lineage_html(uuid) IS
    'The lineage shown above an open session, as HTML (shell.render_lineage''s parts, " · " between them); '
    'empty for a session with none. 22023 "session not found" for an unknown, archived or other tenant''s '
    'session.';
COMMENT ON FUNCTION shell.size_words(bigint) IS
    'A size as the files panel shows it: bytes below 1 KiB, then KiB, MiB, GiB or TiB, one decimal below 10.';
COMMENT ON FUNCTION shell_api.session_files_html(uuid) IS
    'The files panel''s listing as HTML: session_files'' first page (1000 entries), files and links without '
    'the directories, with size, mode and a download button a file, and a note for none or more; '
    'session_files'' errors.';
COMMENT ON FUNCTION shell.compare_side(text, text, integer, text, integer, text) IS
    'One side of a replay comparison row as HTML: its label, exit code (or status before it has one) and '
    'output, each marked "differs" where it differs from the other side''s.';
COMMENT ON FUNCTION shell_api.replay_comparison_html(uuid) IS
    'replay_comparison as the page''s HTML: a title linking the run and its original, how many commands gave '
    'the same result, and a row a command with what differs marked; data-running counts the replayed '
    'commands still to finish. replay_comparison''s errors.';
