-- Terminal commands in history (DESIGN.md §13):
-- 1. A terminal command's article says so (data-tty, with the window it
--    started with in data-cols and data-rows), so a page that reloads its
--    history shows it as a terminal view, as it was shown live.
-- 2. command_input asks for the command before it reads any row, so
--    another tenant's command answers "command not found" whether or not
--    it took input (a SQL function only evaluated the check per row).

-- 1. ---------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION shell.render_command(c shell.commands) RETURNS text
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT format(
        '<article class="cmd%s" id="cmd-%s" data-id="%s" data-status="%s" data-change="%s" '
        'data-outcome="%s"%s%s%s>'
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
        CASE WHEN c.tty THEN format(' data-tty data-cols="%s" data-rows="%s"', c.cols, c.rows)
             ELSE '' END,
        shell.html_escape(shell.short_cwd(coalesce(c.cwd_before, ''))), shell.html_escape(c.command),
        shell.command_buttons(c),
        shell.ansi_html(shell.output_of(c)),
        shell.html_escape(shell.outcome_words(c, shell.time_limit_s())),
        shell.render_changes(c))
$$;

-- 2. ---------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION shell_api.command_input(p_command_id bigint)
RETURNS TABLE (seq integer, offset_ms bigint, data text, redacted boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target bigint := (shell.owned_command(p_command_id)).id;
BEGIN
    RETURN QUERY SELECT i.seq, i.offset_ms, i.data, i.redacted
    FROM shell.command_input i
    WHERE i.command_id = target AND i.kind = 'data'
    ORDER BY i.seq;
END
$$;
