-- Plain output rendered as a terminal shows it. Until now shell.ansi_scan
-- read SGR colours only: a carriage return started no overwrite, ESC ( B
-- (what tput sgr0 and ncurses send) left a stray B, 256-colour and
-- truecolour codes were read as separate codes, and cursor moves and
-- clears were left out, so `watch` ran its screens together.
--   1. The pen: every SGR attribute a terminal shows (bold, dim, italic,
--      underline, reverse, hidden, strike) and colours from the 256
--      palette, truecolour taken to the palette's nearest (classes only:
--      the page's Content-Security-Policy allows no inline style).
--   2. shell.ansi_screen: text with line controls (CR, backspace, tab,
--      erase, cursor moves, clears) is laid out on lines of cells, as a
--      terminal with an endless screen does, and shown as the result.
--      Text without them keeps the one-split path of 0020.
--   3. Pieces join as a terminal would: a piece whose line has controls
--      is rendered with the start of that line (the page replaces its
--      copy's last line, data-line), and a piece that clears the screen
--      says so (data-clear).

-- 1. The pen -------------------------------------------------------------------------

-- The functions run per escape or per line have no SET search_path (they
-- name only shell.* and built-ins, and run as the caller): a SET clause
-- costs every call a configuration change, and keeps an SQL function from
-- being inlined.

CREATE TYPE shell.ansi_pen AS (
    fg integer,  -- palette index 0..255; NULL: the default colour
    bg integer,
    bold boolean,
    dim boolean,
    italic boolean,
    underline boolean,
    reverse boolean,
    hidden boolean,
    strike boolean
);

COMMENT ON TYPE shell.ansi_pen IS 'What SGR codes have set: colours as 256-palette indexes (NULL: default) and the attributes a terminal shows.';

-- xterm's palette: 16 named colours, a 6×6×6 cube, 24 greys.
CREATE FUNCTION shell.ansi_rgb_index(r integer, g integer, b integer) RETURNS integer
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    levels constant integer[] := '{0,95,135,175,215,255}';
    ri integer := CASE WHEN r < 48 THEN 0 WHEN r < 115 THEN 1 ELSE least((r - 35) / 40, 5) END;
    gi integer := CASE WHEN g < 48 THEN 0 WHEN g < 115 THEN 1 ELSE least((g - 35) / 40, 5) END;
    bi integer := CASE WHEN b < 48 THEN 0 WHEN b < 115 THEN 1 ELSE least((b - 35) / 40, 5) END;
    grey integer := greatest(0, least(23, ((r + g + b) / 3 - 3) / 10));
    level integer := 8 + 10 * grey;
    cube_off integer := (levels[ri + 1] - r) ^ 2 + (levels[gi + 1] - g) ^ 2 + (levels[bi + 1] - b) ^ 2;
    grey_off integer := (level - r) ^ 2 + (level - g) ^ 2 + (level - b) ^ 2;
BEGIN
    RETURN CASE WHEN grey_off < cube_off THEN 232 + grey ELSE 16 + 36 * ri + 6 * gi + bi END;
END
$$;

COMMENT ON FUNCTION shell.ansi_rgb_index(integer, integer, integer) IS 'The 256-palette colour (cube or grey, 16..255) nearest a truecolour.';

-- A code's number, or NULL when it is not one a terminal reads (too long).
CREATE FUNCTION shell.ansi_number(code text) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN code IS NULL OR code = '' THEN 0
                WHEN code ~ '^[0-9]+$' AND length(ltrim(code, '0')) <= 3 THEN code::integer END
$$;

COMMENT ON FUNCTION shell.ansi_number(text) IS 'An SGR or cursor parameter as a number: empty is 0, more than three digits (after leading zeros) or anything else NULL.';

-- An extended colour from its parameters after 38 or 48: 5;N or
-- 2;R;G;B (with colons, 2 may be followed by a colour space id).
CREATE FUNCTION shell.ansi_colour(p text[]) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p[1] = '5' AND shell.ansi_number(p[2]) BETWEEN 0 AND 255 THEN shell.ansi_number(p[2])
        WHEN p[1] = '2' AND cardinality(p) >= 4 THEN shell.ansi_rgb_index(
            least(shell.ansi_number(p[cardinality(p) - 2]), 255),
            least(shell.ansi_number(p[cardinality(p) - 1]), 255),
            least(shell.ansi_number(p[cardinality(p)]), 255))
    END
$$;

COMMENT ON FUNCTION shell.ansi_colour(text[]) IS 'The palette index that the parameters after SGR 38 or 48 name (5;N, or 2;R;G;B taken to the nearest); NULL if they name none.';

CREATE FUNCTION shell.ansi_pen_apply(p shell.ansi_pen, params text) RETURNS shell.ansi_pen
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    codes text[] := string_to_array(params, ';');
    i integer := 1;
    n integer;
    sub text[];
    colour integer;
BEGIN
    IF params = '' THEN
        codes := '{0}';
    END IF;
    WHILE i <= cardinality(codes) LOOP
        IF strpos(codes[i], ':') > 0 THEN  -- sub-parameters: 38:5:N, 38:2::R:G:B, 4:3
            sub := string_to_array(codes[i], ':');
            n := shell.ansi_number(sub[1]);
            colour := shell.ansi_colour(sub[2:]);
            IF n = 38 AND colour IS NOT NULL THEN p.fg := colour;
            ELSIF n = 48 AND colour IS NOT NULL THEN p.bg := colour;
            ELSIF n = 4 THEN p.underline := coalesce(shell.ansi_number(sub[2]), 1) <> 0;
            END IF;
            i := i + 1;
            CONTINUE;
        END IF;
        -- The codes are digits (the escape's pattern): a number unless too long.
        IF length(ltrim(codes[i], '0')) > 3 THEN
            i := i + 1;
            CONTINUE;
        END IF;
        n := coalesce(nullif(codes[i], '')::integer, 0);
        IF n IN (38, 48) THEN
            -- 38;5;N takes three codes, 38;2;R;G;B five
            sub := codes[i + 1:i + CASE WHEN codes[i + 1] = '2' THEN 4 ELSE 2 END];
            colour := shell.ansi_colour(sub);
            IF n = 38 AND colour IS NOT NULL THEN p.fg := colour; END IF;
            IF n = 48 AND colour IS NOT NULL THEN p.bg := colour; END IF;
            i := i + 1 + CASE WHEN colour IS NULL THEN 0 ELSE cardinality(sub) END;
            CONTINUE;
        END IF;
        IF n = 0 THEN p := ROW(NULL, NULL, false, false, false, false, false, false, false);
        ELSIF n = 1 THEN p.bold := true;
        ELSIF n = 2 THEN p.dim := true;
        ELSIF n = 3 THEN p.italic := true;
        ELSIF n = 4 THEN p.underline := true;
        ELSIF n = 7 THEN p.reverse := true;
        ELSIF n = 8 THEN p.hidden := true;
        ELSIF n = 9 THEN p.strike := true;
        ELSIF n = 22 THEN p.bold := false; p.dim := false;
        ELSIF n = 23 THEN p.italic := false;
        ELSIF n = 24 THEN p.underline := false;
        ELSIF n = 27 THEN p.reverse := false;
        ELSIF n = 28 THEN p.hidden := false;
        ELSIF n = 29 THEN p.strike := false;
        ELSIF n BETWEEN 30 AND 37 THEN p.fg := n - 30;
        ELSIF n = 39 THEN p.fg := NULL;
        ELSIF n BETWEEN 40 AND 47 THEN p.bg := n - 40;
        ELSIF n = 49 THEN p.bg := NULL;
        ELSIF n BETWEEN 90 AND 97 THEN p.fg := n - 82;
        ELSIF n BETWEEN 100 AND 107 THEN p.bg := n - 92;
        END IF;
        i := i + 1;
    END LOOP;
    RETURN p;
END
$$;

COMMENT ON FUNCTION shell.ansi_pen_apply(shell.ansi_pen, text) IS 'The pen after one SGR escape''s parameters (ESC [ params m; empty is 0, a reset): colours 30-37, 90-97, 40-47, 100-107, 38/48 with 5;N or 2;R;G;B (semicolons or colons), attributes 1-9 and their resets; other codes change nothing.';

-- Reverse swaps the colours here, so the style sheet needs no rule per
-- pair; ansi-reverse gives the default colours swapped. (PL/pgSQL: as an
-- SQL function reading the pen's fields more than once it is not inlined,
-- and is planned again at every call.)
CREATE FUNCTION shell.ansi_pen_classes(p shell.ansi_pen) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    fg integer := CASE WHEN p.reverse THEN p.bg ELSE p.fg END;
    bg integer := CASE WHEN p.reverse THEN p.fg ELSE p.bg END;
    classes text := '';
BEGIN
    IF fg IS NOT NULL THEN  -- the 16 named colours by their SGR code, the others by index
        classes := CASE WHEN fg >= 16 THEN ' ansi-fg-c' || fg
                        ELSE ' ansi-fg-' || (fg + CASE WHEN fg < 8 THEN 30 ELSE 82 END) END;
    END IF;
    IF bg IS NOT NULL THEN
        classes := classes || CASE WHEN bg >= 16 THEN ' ansi-bg-c' || bg
                                   ELSE ' ansi-bg-' || (bg + CASE WHEN bg < 8 THEN 40 ELSE 92 END) END;
    END IF;
    IF p.bold THEN classes := classes || ' ansi-bold'; END IF;
    IF p.dim THEN classes := classes || ' ansi-dim'; END IF;
    IF p.italic THEN classes := classes || ' ansi-italic'; END IF;
    IF p.underline THEN classes := classes || ' ansi-underline'; END IF;
    IF p.strike THEN classes := classes || ' ansi-strike'; END IF;
    IF p.reverse THEN classes := classes || ' ansi-reverse'; END IF;
    IF p.hidden THEN classes := classes || ' ansi-hidden'; END IF;
    RETURN ltrim(classes);
END
$$;

COMMENT ON FUNCTION shell.ansi_pen_classes(shell.ansi_pen) IS 'The classes text in this pen is shown with (empty for the default pen): colours first (ansi-fg-31, ansi-bg-104 for the 16 named ones, ansi-fg-c208 for the others), reverse already applied to them.';

CREATE FUNCTION shell.ansi_pen_sgr(p shell.ansi_pen) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN codes = '' THEN '' ELSE E'\x1b[' || codes || 'm' END
    FROM concat_ws(';',
        CASE WHEN p.bold THEN 1 END, CASE WHEN p.dim THEN 2 END, CASE WHEN p.italic THEN 3 END,
        CASE WHEN p.underline THEN 4 END, CASE WHEN p.reverse THEN 7 END,
        CASE WHEN p.hidden THEN 8 END, CASE WHEN p.strike THEN 9 END,
        CASE WHEN p.fg < 8 THEN (30 + p.fg)::text WHEN p.fg < 16 THEN (82 + p.fg)::text
             WHEN p.fg IS NOT NULL THEN '38;5;' || p.fg END,
        CASE WHEN p.bg < 8 THEN (40 + p.bg)::text WHEN p.bg < 16 THEN (92 + p.bg)::text
             WHEN p.bg IS NOT NULL THEN '48;5;' || p.bg END) AS codes
$$;

COMMENT ON FUNCTION shell.ansi_pen_sgr(shell.ansi_pen) IS 'One SGR escape that sets this pen from the default; empty for the default pen.';

-- 2. Lines of cells ------------------------------------------------------------------

-- One line's cells as HTML. A line is its characters and, in a string of
-- the same length, each character's style (a character standing for an
-- index into the styles seen), so overwriting is a splice of both.
CREATE FUNCTION shell.ansi_line_html(line text, line_styles text, styles text[]) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    parts text[] := '{}';
    at integer := 1;
    n integer;
    style text;
    rest text;
BEGIN
    WHILE at <= length(line) LOOP
        style := substr(line_styles, at, 1);
        rest := substr(line_styles, at);
        n := length(rest) - length(ltrim(rest, style));
        parts := parts || CASE WHEN styles[ascii(style) - 255] = '' THEN shell.html_escape(substr(line, at, n))
            ELSE format('<span class="%s">%s</span>', styles[ascii(style) - 255],
                        shell.html_escape(substr(line, at, n))) END;
        at := at + n;
    END LOOP;
    RETURN array_to_string(parts, '');
END
$$;

COMMENT ON FUNCTION shell.ansi_line_html(text, text, text[]) IS 'One laid-out line as HTML: runs of one style as <span class> (styles[i] for the style character chr(255 + i)), the default style as bare text.';

CREATE FUNCTION shell.ansi_screen(t text, OUT html text, OUT pen shell.ansi_pen)
LANGUAGE plpgsql IMMUTABLE SET search_path = '' AS $_$
DECLARE
    -- One token each: an escape (as ansi_scan reads them), a control, a run of text.
    token_re constant text := E'\x1b(?:\\[[0-?]*[ -/]*[@-~]|\\][^\x07\x1b]*(?:\x07|\x1b\\\\)?|[()*+\\-./#%][ -~]|[^\x1b])?'
                              || E'|[\x01-\x1a\x1c-\x1f\x7f]|[^\x01-\x1f\x7f]+';
    -- Cursor moves stop at this column and row (of the lines so far, if
    -- more): no escape makes more than this many cells out of nothing.
    margin constant integer := 1000;
    lines text[] := '{""}';
    line_styles text[] := '{""}';
    styles text[] := '{""}';
    style text := chr(256);  -- styles[1]: the default pen
    row integer := 1;
    col integer := 0;
    saved integer[] := '{1,0}';
    tok text;
    params text;
    final text;
    n integer;
    k integer;
    line text;
    classes text;
BEGIN
    pen := ROW(NULL, NULL, false, false, false, false, false, false, false);
    FOR tok IN SELECT m[1] FROM regexp_matches(t, '(' || token_re || ')', 'g') AS m LOOP
        IF tok !~ E'^[\x01-\x1f\x7f]' THEN
            -- text: written over the cells from the cursor on
            k := length(tok);
            line := lines[row];
            IF col > length(line) THEN
                line_styles[row] := line_styles[row] || repeat(chr(256), col - length(line));
                line := line || repeat(' ', col - length(line));
            END IF;
            lines[row] := left(line, col) || tok || substr(line, col + k + 1);
            line_styles[row] := left(line_styles[row], col) || repeat(style, k)
                                || substr(line_styles[row], col + k + 1);
            col := col + k;
        ELSIF tok IN (E'\n', E'\x0b', E'\x0c') THEN
            row := row + 1;
            col := 0;
        ELSIF tok = E'\r' THEN
            col := 0;
        ELSIF tok = E'\b' THEN
            col := greatest(col - 1, 0);
        ELSIF tok = E'\t' THEN
            col := least((col / 8 + 1) * 8, greatest(col, margin));
        ELSIF tok = E'\x1bc' THEN  -- reset: a clear screen, default pen
            lines := '{""}'; line_styles := '{""}'; row := 1; col := 0;
            pen := ROW(NULL, NULL, false, false, false, false, false, false, false);
            style := chr(256);
        ELSIF tok IN (E'\x1bD', E'\x1bE') THEN
            row := row + 1;
            col := CASE WHEN tok = E'\x1bE' THEN 0 ELSE col END;
        ELSIF tok = E'\x1bM' THEN
            row := greatest(row - 1, 1);
        ELSIF tok = E'\x1b7' THEN
            saved := ARRAY[row, col];
        ELSIF tok = E'\x1b8' THEN
            row := saved[1]; col := saved[2];
        ELSIF tok ~ E'^\x1b\\[[0-9;:]*[@-~]$' THEN
            params := substr(tok, 3, length(tok) - 3);
            final := right(tok, 1);
            IF final = 'm' THEN
                pen := shell.ansi_pen_apply(pen, params);
                classes := shell.ansi_pen_classes(pen);
                IF array_position(styles, classes) IS NULL THEN
                    styles := styles || classes;
                END IF;
                style := chr(255 + array_position(styles, classes));
                CONTINUE;
            END IF;
            n := greatest(coalesce(shell.ansi_number(split_part(params, ';', 1)), 0), 1);
            line := lines[row];
            CASE final
            WHEN 'A' THEN row := greatest(row - n, 1);
            WHEN 'B', 'e' THEN row := least(row + n, greatest(cardinality(lines), margin));
            WHEN 'C', 'a' THEN col := least(col + n, greatest(col, margin));
            WHEN 'D' THEN col := greatest(col - n, 0);
            WHEN 'E' THEN row := least(row + n, greatest(cardinality(lines), margin)); col := 0;
            WHEN 'F' THEN row := greatest(row - n, 1); col := 0;
            WHEN 'G', '`' THEN col := n - 1;
            WHEN 'd' THEN row := n;
            WHEN 'H', 'f' THEN
                row := n;
                col := greatest(coalesce(shell.ansi_number(split_part(params, ';', 2)), 0), 1) - 1;
            WHEN 'K' THEN
                IF params IN ('', '0') THEN
                    lines[row] := left(line, col);
                    line_styles[row] := left(line_styles[row], col);
                ELSIF params = '1' THEN
                    lines[row] := repeat(' ', least(col + 1, length(line))) || substr(line, col + 2);
                    line_styles[row] := repeat(chr(256), least(col + 1, length(line)))
                                        || substr(line_styles[row], col + 2);
                ELSIF params = '2' THEN
                    lines[row] := ''; line_styles[row] := '';
                END IF;
            WHEN 'J' THEN
                IF params IN ('', '0') THEN
                    lines := lines[1:row]; line_styles := line_styles[1:row];
                    lines[row] := left(line, col);
                    line_styles[row] := left(line_styles[row], col);
                ELSIF params = '1' THEN
                    FOR i IN 1 .. least(row - 1, cardinality(lines)) LOOP
                        lines[i] := ''; line_styles[i] := '';
                    END LOOP;
                    lines[row] := repeat(' ', least(col + 1, length(line))) || substr(line, col + 2);
                    line_styles[row] := repeat(chr(256), least(col + 1, length(line)))
                                        || substr(line_styles[row], col + 2);
                ELSIF params IN ('2', '3') THEN  -- the screen is cleared: the cursor stays
                    lines := array_fill(''::text, ARRAY[row]);
                    line_styles := lines;
                END IF;
            WHEN '@' THEN
                IF col < length(line) THEN
                    -- what is pushed past the margin (or the line's end) is lost
                    k := greatest(length(line), margin);
                    lines[row] := left(left(line, col) || repeat(' ', n) || substr(line, col + 1), k);
                    line_styles[row] := left(left(line_styles[row], col) || repeat(chr(256), n)
                                             || substr(line_styles[row], col + 1), k);
                END IF;
            WHEN 'P' THEN
                lines[row] := left(line, col) || substr(line, col + n + 1);
                line_styles[row] := left(line_styles[row], col) || substr(line_styles[row], col + n + 1);
            WHEN 'X' THEN
                IF col < length(line) THEN
                    k := least(n, length(line) - col);
                    lines[row] := left(line, col) || repeat(' ', k) || substr(line, col + k + 1);
                    line_styles[row] := left(line_styles[row], col) || repeat(chr(256), k)
                                        || substr(line_styles[row], col + k + 1);
                END IF;
            ELSE NULL;  -- scrolling regions, insert and delete lines, reports: no change
            END CASE;
        END IF;
        -- Rows the cursor moved to exist from now on, empty.
        FOR i IN cardinality(lines) + 1 .. row LOOP
            lines[i] := ''; line_styles[i] := '';
        END LOOP;
    END LOOP;
    SELECT string_agg(shell.ansi_line_html(l.line, l.line_styles, styles), E'\n' ORDER BY l.i)
    INTO html
    FROM unnest(lines, line_styles) WITH ORDINALITY AS l(line, line_styles, i);
END
$_$;

COMMENT ON FUNCTION shell.ansi_screen(text, OUT text, OUT shell.ansi_pen) IS 'Text laid out as a terminal with an endless screen shows it: text overwrites cells from the cursor, CR, backspace, tab, newline (also a carriage return, as the terminal driver makes it), cursor moves (CSI A-G, H, f, d, `, a, e, ESC D, E, M, 7, 8), erase in line and display, insert, delete and erase characters; a clear (CSI 2J or 3J, ESC c) empties every line. The HTML of its lines, and the pen it leaves. Cursor moves stop at column and row 1000 (or the line''s end, the last line, if further). Other escapes are read and change nothing; wide characters count one column.';

-- 3. One scan: the one-split path when no control moves the cursor -----------------------------

-- At the very end: a lone ESC, a control sequence before its final byte,
-- an OSC string before its terminator, a charset selection before its name.
CREATE FUNCTION shell.ansi_unfinished(t text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT substring(t FROM E'\x1b(?:\\[[0-?]*[ -/]*|\\][^\x07\x1b]*|[()*+\\-./#%])?$')
$$;

COMMENT ON FUNCTION shell.ansi_unfinished(text) IS 'The escape a text stops inside (the next piece of the output completes it), or NULL.';

CREATE OR REPLACE FUNCTION shell.ansi_scan(t text, p_html boolean, OUT html text, OUT state text)
LANGUAGE plpgsql IMMUTABLE SET search_path = '' AS $_$
DECLARE
    -- SGR escapes, and ESC c (a reset: the default pen again)
    sgr constant text := E'\x1b(?:\\[([0-9;:]*)m|c)';
    -- ESC ESC is a lone ESC and the start of the next escape, as a
    -- terminal reads it; so cut between the two, pieces show what the whole does.
    other_escapes constant text := E'\x1b(\\[[0-?]*[ -/]*[@-~]|\\][^\x07\x1b]*(\x07|\x1b\\\\)?|[()*+\\-./#%][ -~]|[^\x1b])?|[\x01-\x07\x0e-\x1a\x1c-\x1f\x7f]';
    -- Whatever moves the cursor other than down a line: laid out in cells.
    layout constant text := E'[\b\t\r\x0b\x0c]|\x1b(\\[[0-9;:]*[@A-HJKPXadef`]|[cDEM78])';
    pen shell.ansi_pen := ROW(NULL, NULL, false, false, false, false, false, false, false);
    pieces text[] := '{}';
    laid_out record;
    pending text;
    classes text;
    segment text;
    codes text;
BEGIN
    html := '';
    state := '';
    IF t IS NULL OR t !~ E'[\x01-\x09\x0b-\x1f\x7f]' THEN
        IF p_html THEN
            html := shell.html_escape(t);
        END IF;
        RETURN;
    END IF;
    pending := shell.ansi_unfinished(t);
    IF pending IS NOT NULL THEN
        t := left(t, -length(pending));
    END IF;
    IF p_html AND t ~ layout THEN  -- laid out in cells, which gives the pen too
        laid_out := shell.ansi_screen(t);
        html := laid_out.html;
        state := shell.ansi_pen_sgr(laid_out.pen) || coalesce(pending, '');
        RETURN;
    END IF;
    -- The state needs only the codes: without the HTML, no split (each
    -- segment is then NULL).
    FOR segment, codes IN
        SELECT u.part, u.codes
        FROM unnest(CASE WHEN p_html THEN regexp_split_to_array(t, sgr) END,
                    ARRAY(SELECT coalesce(m[1], '0') FROM regexp_matches(t, sgr, 'g') AS m)) AS u(part, codes)
    LOOP
        IF p_html THEN
            segment := regexp_replace(segment, other_escapes, '', 'g');
            IF segment <> '' THEN
                classes := shell.ansi_pen_classes(pen);
                pieces := pieces || CASE WHEN classes = '' THEN shell.html_escape(segment)
                    ELSE format('<span class="%s">%s</span>', classes, shell.html_escape(segment)) END;
            END IF;
        END IF;
        CONTINUE WHEN codes IS NULL;
        pen := shell.ansi_pen_apply(pen, codes);
    END LOOP;
    IF p_html THEN
        html := array_to_string(pieces, '');
    END IF;
    state := shell.ansi_pen_sgr(pen) || coalesce(pending, '');
END
$_$;

COMMENT ON FUNCTION shell.ansi_scan(text, boolean, OUT text, OUT text) IS 'One pass over a text: its HTML (when p_html; laid out by shell.ansi_screen when a control moves the cursor, else one split at the SGR escapes) and its state (the escapes that continue it: one SGR for the pen it leaves, an escape it stops inside). ansi_html and ansi_state read one each.';

COMMENT ON FUNCTION shell.ansi_html(text) IS 'A text as HTML, as a terminal shows it: SGR attributes as <span class="ansi-fg-31 ansi-bold">, carriage returns, backspaces, erases and cursor moves laid out (shell.ansi_screen), other escapes left out, as is an escape the text stops inside.';

COMMENT ON FUNCTION shell.ansi_state(text) IS 'The escapes that continue a text: put before what follows, they give it the pen the text left (one SGR) and complete an escape it stops inside; empty when there are none.';

-- The start of the last line of a text, where the pieces after it are
-- rendered from when they (or that line) hold a control that moves the cursor.
CREATE FUNCTION shell.ansi_open_line(t text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT substring(t FROM E'[^\n]*$')
$$;

COMMENT ON FUNCTION shell.ansi_open_line(text) IS 'The text''s last line, from after its last newline (all of it without one).';

-- Whether a piece clears the screen (a clear that starts in the escape the
-- output before it stopped inside counts: the piece completes it).
CREATE FUNCTION shell.ansi_clears(p_before text, p_piece text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT (coalesce(shell.ansi_unfinished(p_before), '') || p_piece) ~ E'\x1b(\\[[23]J|c)'
$$;

COMMENT ON FUNCTION shell.ansi_clears(text, text) IS 'Whether p_piece, after p_before, holds a clear of the screen (CSI 2J, CSI 3J, ESC c).';

-- 3. Pieces joined as a terminal would ------------------------------------------------

CREATE OR REPLACE FUNCTION shell.render_piece(r shell.listing_row) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    colour_window constant integer := 65536;
    layout constant text := E'[\b\t\r\x0b\x0c]|\x1b(\\[[0-9;:]*[@A-HJKPXadef`]|[cDEM78])';
    c shell.commands := r.c;
    piece_end bigint := r.piece_from + octet_length(r.piece);
    before text;
    open_line text := '';
    joins text := '';
    html text;
BEGIN
    -- render_command shows c.output when it is set: the piece stands in
    -- for the whole output.
    c.output := r.piece;
    IF r.piece_from > 0 AND r.piece <> '' AND NOT c.tty THEN
        before := shell.output_before(r.c, r.piece_from, colour_window);
        -- The line the piece continues is rendered again with it when a
        -- control in either moves the cursor (a CR in it overwrites that line).
        open_line := shell.ansi_open_line(before);
        IF (open_line || r.piece) !~ layout THEN
            open_line := '';
        ELSE
            joins := format(' data-line="%s"', r.piece_from - octet_length(open_line));
        END IF;
        IF shell.ansi_clears(before, r.piece) THEN
            joins := joins || ' data-clear';
        END IF;
        c.output := shell.ansi_state(left(before, length(before) - length(open_line))) || open_line || r.piece;
    END IF;
    c.command := r.command;
    html := shell.render_command(c);
    html := regexp_replace(html, '<pre class="out"',
        format('<pre class="out" data-from="%s" data-end="%s" data-bytes="%s"%s',
               r.piece_from, piece_end, r.total, joins));
    IF piece_end < r.total AND r.piece_from = 0 THEN
        html := regexp_replace(html, '</pre>', format(
            '</pre><p class="cut" data-cut="%s">output cut: %s of %s bytes shown</p>',
            c.id, piece_end, r.total));
    END IF;
    RETURN html;
END
$$;

COMMENT ON FUNCTION shell.render_piece(shell.listing_row) IS 'One listing row as HTML: render_command with the piece as output (in the pen the 64 KiB before it left; a terminal command''s piece as it is), its <pre> marked with data-from, data-end and data-bytes, and a marker after a cut output. A piece whose line (or itself) holds a control that moves the cursor is rendered from that line''s start, given as data-line: the page replaces its copy''s last line with it. data-clear: the piece clears the screen, so the page''s copy before it goes.';

-- 4. An output that starts with a newline keeps it ----------------------------------

-- An HTML parser drops a newline right after <pre>, so a piece that
-- started with one (printf a; sleep 1; printf '\nb') ran into the line
-- before it on the page. As HTML serializers do, one more goes first.
CREATE FUNCTION shell.pre_text(html text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN left(html, 1) = E'\n' THEN E'\n' || html ELSE html END
$$;

COMMENT ON FUNCTION shell.pre_text(text) IS 'HTML as the content of a <pre>: a leading newline doubled, since a parser drops the first.';

CREATE OR REPLACE FUNCTION shell.render_command(c shell.commands) RETURNS text
LANGUAGE sql STABLE SET search_path = '' AS $_$
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
        shell.pre_text(CASE WHEN c.tty THEN shell.raw_html(shell.output_of(c))
                            ELSE shell.ansi_html(shell.output_of(c)) END),
        shell.html_escape(shell.outcome_words(c, shell.time_limit_s())),
        shell.render_changes(c))
$_$;

COMMENT ON FUNCTION shell.render_command(shell.commands) IS 'One command as the terminal page''s HTML article: prompt, command, buttons, output (coloured HTML laid out as a terminal shows it; a terminal command''s raw stream, in <pre data-raw>; a leading newline kept, shell.pre_text), outcome in words and file changes, with the data- attributes the page reads (status, change, start and time limit, cwd, terminal window).';
