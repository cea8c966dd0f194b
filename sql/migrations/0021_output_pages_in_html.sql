-- A cut output's pages as HTML. The page's "show all" read the rest of an
-- output as plain text (read_output) and stripped the escapes itself: no
-- colours past the cut, and an escape split at a page's edge left a stray
-- fragment. read_output_html gives read_output's pages rendered as the
-- listings render a piece (shell.render_piece): in the colours the output
-- before the page left in force, an escape split at an edge whole on the
-- page that ends it, and <pre class="out"> carrying data-from, data-end and
-- data-bytes as a listing's does.

-- read_output's checks and errors (p_offset, p_limit, another tenant's
-- command), then its page. The HTML (the spans, the escaping of <, > and &)
-- is held to the listings' budget: a page that renders larger is shortened
-- at a character, and its data-end says where the next begins.
CREATE FUNCTION shell_api.read_output_html(p_command_id bigint, p_offset bigint DEFAULT 0,
                                           p_limit integer DEFAULT 1048576)
RETURNS shell_api."text/html"
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    budget integer := shell.listing_budget();
    page record;
    r shell.listing_row;
    html text;
BEGIN
    SELECT * INTO page FROM shell_api.read_output(p_command_id, p_offset, p_limit);
    SELECT x INTO r.c FROM shell.commands x WHERE x.id = p_command_id;  -- row-level security
    r.command := '';  -- the page is only output: the command is in the listing
    r.piece := page.output;
    r.piece_from := page.output_offset;
    r.total := page.output_bytes;
    html := shell.render_piece(r);
    WHILE octet_length(html) > budget AND r.piece <> '' LOOP
        r.piece := shell.utf8_slice(r.piece, 0, octet_length(r.piece) / 2);
        html := shell.render_piece(r);
    END LOOP;
    RETURN html;
END
$$;
