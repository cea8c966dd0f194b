-- The page's view of the workspace (DESIGN.md §9): under each finished
-- command, what it changed in the session's files.

-- A one-line summary ("2 added, 1 modified, 1 deleted") that opens to the
-- paths, or '' when the command changed nothing. Most commands leave the
-- root as it was: they cost one comparison of two hashes. The others cost a
-- tree_diff, which enters only the subtrees that differ; the list is cut at
-- max_listed paths, the counts are not. The roots are read again through
-- command_changes (the caller's own command only), never taken from the
-- row passed in, which a tenant calling this directly could make up.
CREATE FUNCTION shell.render_changes(c shell.commands) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    max_listed constant integer := 100;
    total bigint;
    summary text;
    listed text;
BEGIN
    IF c.status NOT IN ('done', 'failed', 'cancelled')
       OR c.root_before IS NULL OR c.root_after IS NULL OR c.root_before = c.root_after THEN
        RETURN '';
    END IF;
    WITH d AS (
        SELECT ch.path, ch.change, ch.kind,
               row_number() OVER (ORDER BY convert_to(ch.path, 'UTF8')) AS n
        FROM shell_api.command_changes(c.id) ch
    )
    SELECT count(*),
           concat_ws(', ',
               nullif(count(*) FILTER (WHERE d.change = 'added'), 0) || ' added',
               nullif(count(*) FILTER (WHERE d.change = 'modified'), 0) || ' modified',
               nullif(count(*) FILTER (WHERE d.change = 'deleted'), 0) || ' deleted'),
           string_agg(format('<li class="%s"><span class="change">%s</span> <span class="path">%s</span></li>',
                             d.change, d.change,
                             shell.html_escape(d.path || CASE WHEN d.kind = 'dir' THEN '/' ELSE '' END)),
                      '' ORDER BY d.n) FILTER (WHERE d.n <= max_listed)
    INTO total, summary, listed
    FROM d;
    IF total = 0 THEN
        RETURN '';
    END IF;
    RETURN format('<details class="changes"><summary>%s</summary><ul>%s%s</ul></details>',
                  summary, listed,
                  CASE WHEN total > max_listed
                       THEN format('<li class="more">and %s more</li>', total - max_listed) ELSE '' END);
END
$$;

-- One command as the terminal shows it (as in 0007), now with its changes
-- below; an upload's history entry is marked, so the page can tell it from
-- a command typed at the prompt.
CREATE OR REPLACE FUNCTION shell.render_command(c shell.commands) RETURNS text
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT format(
        '<article class="cmd%s" id="cmd-%s" data-id="%s" data-status="%s" data-change="%s">'
        '<div class="line"><span class="prompt">%s $</span> <span class="text">%s</span>%s</div>'
        '<pre class="out">%s</pre><div class="meta">%s</div>%s</article>',
        CASE WHEN c.upload IS NOT NULL THEN ' upload' ELSE '' END,
        c.id, c.id, c.status, c.change_seq,
        shell.html_escape(coalesce(c.cwd_before, '')), shell.html_escape(c.command),
        CASE WHEN c.status IN ('pending', 'claimed', 'running')
             THEN format('<button type="button" class="cancel" data-cancel="%s">cancel</button>', c.id)
             ELSE format('<button type="button" class="fork" data-fork="%s">fork from here</button>', c.id) END,
        shell.ansi_html(shell.output_of(c)),
        shell.html_escape(concat_ws(' · ', c.status,
            'exit ' || c.exit_code, c.reason, c.duration_ms || ' ms',
            CASE WHEN c.truncated THEN 'output truncated' END)),
        shell.render_changes(c))
$$;
