-- A terminal command's output in its fragments is the raw stream (DESIGN.md
-- §13): the page's terminal view writes it as it comes, without a second
-- request for the bytes (read_output), and nothing is spent colouring HTML
-- that the view never shows.
-- 1. shell.raw_html: text as HTML whose text content is the text again,
--    carriage returns included (an HTML parser turns a bare CR into a line
--    feed; a character reference survives).
-- 2. render_command: a terminal command's <pre class="out" data-raw> holds
--    the raw output; render_piece: its piece is exactly the bytes from
--    data-from (no colour state carried in front of it).

-- 1. ---------------------------------------------------------------------------------

CREATE FUNCTION shell.raw_html(t text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT replace(shell.html_escape(t), E'\r', '&#13;')
$$;
COMMENT ON FUNCTION shell.raw_html(text) IS
    'Text as HTML whose text content is exactly the text (escaped, carriage returns as &#13;).';

-- 2. ---------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION shell.render_command(c shell.commands) RETURNS text
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT format(
        '<article class="cmd%s" id="cmd-%s" data-id="%s" data-status="%s" data-change="%s" '
        'data-outcome="%s"%s%s%s>'
        '<div class="line"><span class="prompt">%s $</span> <span class="text">%s</span>'
        '<span class="actions">%s</span></div>'
        '<pre class="out"%s>%s</pre><div class="meta">%s</div>%s</article>',
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
        CASE WHEN c.tty THEN ' data-raw' ELSE '' END,
        CASE WHEN c.tty THEN shell.raw_html(shell.output_of(c)) ELSE shell.ansi_html(shell.output_of(c)) END,
        shell.html_escape(shell.outcome_words(c, shell.time_limit_s())),
        shell.render_changes(c))
$$;

CREATE OR REPLACE FUNCTION shell.render_piece(r shell.listing_row) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    colour_window constant integer := 65536;
    c shell.commands := r.c;
    piece_end bigint := r.piece_from + octet_length(r.piece);
    html text;
BEGIN
    -- render_command shows c.output when it is set: the piece stands in
    -- for the whole output.
    c.output := r.piece;
    IF r.piece_from > 0 AND r.piece <> '' AND NOT c.tty THEN
        c.output := shell.ansi_state(shell.output_before(r.c, r.piece_from, colour_window)) || r.piece;
    END IF;
    c.command := r.command;
    html := shell.render_command(c);
    html := regexp_replace(html, '<pre class="out"',
        format('<pre class="out" data-from="%s" data-end="%s" data-bytes="%s"', r.piece_from, piece_end, r.total));
    IF piece_end < r.total AND r.piece_from = 0 THEN
        html := regexp_replace(html, '</pre>', format(
            '</pre><p class="cut" data-cut="%s">output cut: %s of %s bytes shown</p>',
            c.id, piece_end, r.total));
    END IF;
    RETURN html;
END
$$;

COMMENT ON FUNCTION shell.render_command(shell.commands) IS
    'One command as the terminal page''s HTML article: prompt, command, buttons, output (coloured HTML; a '
    'terminal command''s raw stream, in <pre data-raw>), outcome in words and file changes, with the data- '
    'attributes the page reads (status, change, start and time limit, cwd, terminal window).';

COMMENT ON FUNCTION shell.render_piece(shell.listing_row) IS
    'One listing row as HTML: render_command with the piece as output (in the colours the 64 KiB before it '
    'left; a terminal command''s piece as it is), its <pre> marked with data-from, data-end and data-bytes, '
    'and a marker after a cut output.';
