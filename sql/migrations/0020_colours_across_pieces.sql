-- Colours across the edges of pieces. A command's output reaches the page a
-- piece at a time (the live feed's tails, a cut listing), each rendered on
-- its own, so a colour set before a piece's start was lost in it, and an
-- escape split between two pieces showed as stray characters in both.
--   1. shell.ansi_scan: one pass over a text gives its HTML and the
--      escapes that continue it (the colours it leaves in force, an escape
--      it stops inside); shell.ansi_html and shell.ansi_state read one each.
--      The HTML leaves out an escape the text stops inside: the next piece
--      renders it whole.
--   2. shell.render_piece renders a piece that starts past byte 0 after the
--      state of a window of the output just before it.
-- The JSON listings keep the raw text: only the HTML changes.

-- 1. One pass, two answers ----------------------------------------------------------

-- The escapes are read as by shell.ansi_html before (0017), in linear
-- time: one split of the text, pieces collected in an array joined once.
-- Besides the unfinished escape at the end, two differences: in ESC ESC
-- the second ESC starts the next escape (the pair was taken as one escape,
-- and the rest of the next one shown as text), and an SGR code too long
-- for an integer is ignored (it was an error that broke the listing it was in).
CREATE FUNCTION shell.ansi_scan(t text, p_html boolean, OUT html text, OUT state text)
LANGUAGE plpgsql IMMUTABLE SET search_path = '' AS $$
DECLARE
    sgr constant text := E'\x1b\\[([0-9;]*)m';
    -- ESC ESC is a lone ESC and the start of the next escape, as a
    -- terminal reads it; so cut between the two, pieces show what the whole does.
    other_escapes constant text := E'\x1b(\\[[0-9;?]*[ -/]*[@-~]|\\][^\x07\x1b]*(\x07|\x1b\\\\)?|[^\x1b])?';
    -- At the very end: a lone ESC, a control sequence before its final
    -- byte, an OSC string before its terminator.
    unfinished constant text := E'\x1b(?:\\[[0-9;?]*[ -/]*|\\][^\x07\x1b]*)?$';
    pieces text[] := '{}';
    fg integer;
    bg integer;
    bold boolean := false;
    pending text;
    classes text;
    segment text;
    codes text;
    code text;
    n integer;
BEGIN
    html := '';
    state := '';
    IF t IS NULL OR strpos(t, E'\x1b') = 0 THEN
        IF p_html THEN
            html := shell.html_escape(t);
        END IF;
        RETURN;
    END IF;
    pending := substring(t FROM unfinished);
    IF pending IS NOT NULL THEN
        t := left(t, -length(pending));
    END IF;
    -- The state needs only the codes: without the HTML, no split (each
    -- segment is then NULL).
    FOR segment, codes IN
        SELECT u.part, u.codes
        FROM unnest(CASE WHEN p_html THEN regexp_split_to_array(t, sgr) END,
                    ARRAY(SELECT m[1] FROM regexp_matches(t, sgr, 'g') AS m)) AS u(part, codes)
    LOOP
        IF p_html THEN
            segment := regexp_replace(segment, other_escapes, '', 'g');
            IF segment <> '' THEN
                classes := concat_ws(' ', 'ansi-fg-' || fg, 'ansi-bg-' || bg,
                                     CASE WHEN bold THEN 'ansi-bold' END);
                pieces := pieces || CASE WHEN classes = '' THEN shell.html_escape(segment)
                    ELSE format('<span class="%s">%s</span>', classes, shell.html_escape(segment)) END;
            END IF;
        END IF;
        CONTINUE WHEN codes IS NULL;
        FOREACH code IN ARRAY string_to_array(CASE WHEN codes = '' THEN '0' ELSE codes END, ';') LOOP
            CONTINUE WHEN length(ltrim(code, '0')) > 3;
            n := nullif(code, '')::integer;
            IF n IS NULL OR n = 0 THEN fg := NULL; bg := NULL; bold := false;
            ELSIF n = 1 THEN bold := true;
            ELSIF n = 22 THEN bold := false;
            ELSIF n BETWEEN 30 AND 37 OR n BETWEEN 90 AND 97 THEN fg := n;
            ELSIF n = 39 THEN fg := NULL;
            ELSIF n BETWEEN 40 AND 47 OR n BETWEEN 100 AND 107 THEN bg := n;
            ELSIF n = 49 THEN bg := NULL;
            END IF;
        END LOOP;
    END LOOP;
    html := array_to_string(pieces, '');
    state := concat_ws(';', CASE WHEN bold THEN 1 END, fg, bg);
    state := CASE WHEN state = '' THEN '' ELSE E'\x1b[' || state || 'm' END || coalesce(pending, '');
END
$$;

-- A text as HTML: colours as <span class="ansi-fg-31 ansi-bold">, other
-- escapes left out, as is an escape the text stops inside.
CREATE OR REPLACE FUNCTION shell.ansi_html(t text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT (shell.ansi_scan(t, true)).html
$$;

-- The escapes that continue t: put before the text that follows t, they
-- give it the colours t leaves in force (one SGR sequence) and complete an
-- escape t stops inside. '' when t leaves neither.
CREATE FUNCTION shell.ansi_state(t text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT (shell.ansi_scan(t, false)).state
$$;

-- 2. Pieces rendered in the state the output before them left ----------------------

-- At most p_bytes bytes of c's output just before byte p_at (a character
-- boundary), starting on a character. The chunks that hold them are found
-- from the sizes of all the command's chunks (one row each; no data is read
-- for that), and only theirs are read.
CREATE FUNCTION shell.output_before(c shell.commands, p_at bigint, p_bytes integer) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    joined text;
    joined_from bigint;
    b bytea;
    e integer;
    s integer;
BEGIN
    SELECT string_agg(ch.data, '' ORDER BY ch.seq), min(ch.upto - octet_length(ch.data))
    INTO joined, joined_from
    FROM (SELECT o.seq, o.data, sum(octet_length(o.data)) OVER (ORDER BY o.seq) AS upto
          FROM shell.output_chunks o WHERE o.command_id = c.id) ch
    WHERE ch.upto > p_at - p_bytes AND ch.upto - octet_length(ch.data) < p_at;
    IF joined IS NULL THEN  -- output stored whole, never streamed
        joined := coalesce(c.output, '');
        joined_from := 0;
    END IF;
    b := convert_to(joined, 'UTF8');
    e := least(p_at - joined_from, length(b));
    s := greatest(e - p_bytes, 0);
    WHILE s < e AND get_byte(b, s) BETWEEN 128 AND 191 LOOP  -- inside a character
        s := s + 1;
    END LOOP;
    RETURN convert_from(substring(b FROM s + 1 FOR e - s), 'UTF8');
END
$$;

-- A piece past byte 0 is rendered after the escapes that continue the
-- output before it (shell.ansi_state), which render no text: its colours
-- are those in force where it starts, and an escape split at its start is
-- whole again. The previous piece's HTML left that escape out.
-- Only a window of colour_window bytes before the piece is read, so a
-- row's cost stays bounded however long the output: a colour set before
-- the window and still in force there is not seen, and the piece shows
-- uncoloured until the output's next colour. 64 KiB is hundreds of lines,
-- more than a colour is usually held for, and no more than one piece.
-- The spans this adds count against render_listing's budget like any.
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
    IF r.piece_from > 0 AND r.piece <> '' THEN
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
