-- Listings bounded by a byte budget, and the live feed (DESIGN.md §12).
--
-- Listing and paging, one scheme:
--   * rows are paged by keyset cursors on monotone keys, each exclusive:
--     latest_output's p_since_id (after) and p_before_id (before, "load
--     earlier") on the command id, session_changes' p_after_change on the
--     change cursor; PostgREST's limit/offset/Range/count still apply to the
--     rows a function returns, and the counts describe all of them;
--   * a command's text in a listing is bounded: each row carries at most
--     p_output_limit bytes of output (UTF-8, cut at a character), and the
--     whole answer at most shell.listing_budget() bytes of output and command
--     text as JSON (or HTML) writes them, given out newest command first.
--     A row says where its output starts (output_offset), how long the whole
--     output is (output_bytes) and whether it stops short (output_cut); the
--     HTML marks a cut visibly. shell_api.read_output pages the whole text by
--     byte offset.
--
-- The live feed: every output chunk records the change that appended it, so
-- session_changes(p_tail => true) sends only the output that arrived after
-- the caller's cursor (a running command's output is appended, not re-sent);
-- a cursor past the session's newest change is clamped to it. Executors may
-- append output quietly (p_notify => false) and announce it later
-- (announce_output): the change cursor still moves on every chunk, but
-- listeners hear of a streaming command a few times a second, not once per
-- flush.

CREATE FUNCTION shell.listing_budget() RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT coalesce((SELECT c.value::integer FROM shell.config c WHERE c.key = 'listing_budget_bytes'),
                    3145728)
$$;

-- Bytes [p_from, p_from + p_limit) of t's UTF-8, the end moved back to a
-- character boundary (but never below one whole character). A start inside
-- a character is 22023.
CREATE FUNCTION shell.utf8_slice(t text, p_from bigint, p_limit bigint) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = '' AS $$
DECLARE
    b bytea;
    n integer;
    e integer;
BEGIN
    IF t IS NULL OR p_limit <= 0 THEN
        RETURN '';
    END IF;
    -- A character is at least one byte: the first p_from + p_limit
    -- characters hold every byte asked for, and left() reads no further.
    b := convert_to(left(t, least(p_from + p_limit, 1073741823)::integer), 'UTF8');
    n := length(b);
    IF p_from >= n THEN
        RETURN '';
    END IF;
    IF get_byte(b, p_from::integer) BETWEEN 128 AND 191 THEN
        RAISE EXCEPTION 'offset % is inside a character', p_from USING ERRCODE = '22023',
            HINT = 'Use an offset a listing or read_output gave (output_offset, next_offset).';
    END IF;
    e := least(p_from + p_limit, n)::integer;
    WHILE e < n AND get_byte(b, e) BETWEEN 128 AND 191 LOOP
        e := e - 1;
    END LOOP;
    IF e <= p_from THEN
        e := p_from::integer + 1;
        WHILE e < n AND get_byte(b, e) BETWEEN 128 AND 191 LOOP
            e := e + 1;
        END LOOP;
    END IF;
    RETURN convert_from(substring(b FROM p_from::integer + 1 FOR e - p_from::integer), 'UTF8');
END
$$;

-- Which change appended each chunk (NULL for chunks from before this
-- migration): the feed's tails start where the caller's cursor left off.
ALTER TABLE shell.output_chunks ADD COLUMN change_seq bigint;

-- A piece of a command's output: from byte p_from (or, with p_seen_change,
-- from where the output stood at that change), at most p_limit bytes; with
-- the piece's start and the whole output's size. Reads only the chunks the
-- piece overlaps (row-level security applies: a tenant reads only its own).
CREATE FUNCTION shell.output_piece(c shell.commands, p_from bigint, p_limit bigint,
                                   p_seen_change bigint DEFAULT NULL,
                                   OUT piece text, OUT piece_from bigint, OUT total bigint)
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    seen bigint;
    chunks bigint;
    joined text;
    joined_from bigint;
BEGIN
    SELECT count(*), coalesce(max(ch.upto), 0),
           coalesce(max(ch.upto) FILTER (WHERE ch.change_seq <= p_seen_change), 0)
    INTO chunks, total, seen
    FROM (SELECT o.change_seq, sum(octet_length(o.data)) OVER (ORDER BY o.seq) AS upto
          FROM shell.output_chunks o WHERE o.command_id = c.id) ch;
    IF chunks = 0 AND c.output IS NOT NULL THEN  -- output stored whole, never streamed
        total := octet_length(c.output);
        piece_from := CASE WHEN p_seen_change IS NULL THEN least(p_from, total)
                           WHEN c.change_seq <= p_seen_change THEN total ELSE 0 END;
        piece := shell.utf8_slice(c.output, piece_from, p_limit);
        RETURN;
    END IF;
    piece_from := CASE WHEN p_seen_change IS NULL THEN least(p_from, total) ELSE seen END;
    IF p_limit <= 0 OR piece_from >= total THEN
        piece := '';
        RETURN;
    END IF;
    SELECT string_agg(ch.data, '' ORDER BY ch.seq), min(ch.upto - octet_length(ch.data))
    INTO joined, joined_from
    FROM (SELECT o.seq, o.data, sum(octet_length(o.data)) OVER (ORDER BY o.seq) AS upto
          FROM shell.output_chunks o WHERE o.command_id = c.id) ch
    WHERE ch.upto > piece_from AND ch.upto - octet_length(ch.data) < piece_from + p_limit;
    piece := shell.utf8_slice(joined, piece_from - joined_from, p_limit);
END
$$;

CREATE FUNCTION shell.check_output_limit(p_output_limit integer) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
BEGIN
    IF p_output_limit IS NULL OR p_output_limit NOT BETWEEN 0 AND shell.listing_budget() THEN
        RAISE EXCEPTION 'p_output_limit must be between 0 and % bytes', shell.listing_budget()
            USING ERRCODE = '22023', HINT = 'Read longer outputs with read_output.';
    END IF;
END
$$;

-- A listing's rows: the commands given (oldest first), each with a piece of
-- its output within p_output_limit and within the budget, which the newest
-- commands get first. A row past the budget keeps its place (counts stay
-- true) with no output and at most 1 KiB of its command. The cost of a
-- piece is its size as JSON writes it (a control byte costs six).
CREATE TYPE shell.listing_row AS (
    c            shell.commands,
    command      text,
    piece        text,
    piece_from   bigint,
    total        bigint
);

CREATE FUNCTION shell.listing(p_commands shell.commands[], p_output_limit integer,
                              p_seen_change bigint DEFAULT NULL)
RETURNS SETOF shell.listing_row
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    n integer := coalesce(array_length(p_commands, 1), 0);
    remaining bigint := shell.listing_budget();
    answer shell.listing_row[] := '{}';
    r shell.listing_row;
    cost bigint;
    command_cost bigint;
    size bigint;
BEGIN
    FOR i IN REVERSE n .. 1 LOOP
        r.c := p_commands[i];
        r.command := (r.c).command;
        command_cost := octet_length(to_json(r.command)::text) + 256;  -- with the row's other fields
        IF command_cost > remaining THEN
            r.command := shell.utf8_slice(r.command, 0, 1024) || ' …';
            command_cost := octet_length(to_json(r.command)::text) + 256;
        END IF;
        remaining := remaining - command_cost;
        SELECT p.piece, p.piece_from, p.total INTO r.piece, r.piece_from, r.total
        FROM shell.output_piece(r.c, 0, greatest(least(p_output_limit, remaining), 0), p_seen_change) p;
        cost := octet_length(to_json(r.piece)::text) - 2;
        -- Escapes made it larger than the budget left: take a shorter piece.
        WHILE cost > greatest(remaining, 0) AND r.piece <> '' LOOP
            size := octet_length(r.piece) * greatest(remaining, 0) / cost;
            r.piece := CASE WHEN size <= 0 THEN '' ELSE shell.utf8_slice(r.piece, 0, size) END;
            cost := octet_length(to_json(r.piece)::text) - 2;
        END LOOP;
        remaining := remaining - cost;
        answer[i] := r;
    END LOOP;
    RETURN QUERY SELECT * FROM unnest(answer);
END
$$;

-- The terminal's HTML for listing rows: each command as render_command
-- shows it, with its piece of output. The <pre> says which bytes it holds
-- (data-from, data-end of data-bytes), and a cut output gets a visible
-- marker after it. The HTML's own size counts against the budget: an
-- article too large for what is left is shown without output.
CREATE FUNCTION shell.render_listing(p_rows shell.listing_row[]) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    remaining bigint := shell.listing_budget();
    parts text[] := '{}';
    r shell.listing_row;
    html text;
    n integer := coalesce(array_length(p_rows, 1), 0);
BEGIN
    FOR i IN REVERSE n .. 1 LOOP
        r := p_rows[i];
        html := shell.render_piece(r);
        IF octet_length(html) > remaining AND r.piece <> '' THEN
            r.piece := '';
            html := shell.render_piece(r);
        END IF;
        remaining := remaining - octet_length(html);
        parts[i] := html;
    END LOOP;
    RETURN array_to_string(parts, E'\n');
END
$$;

CREATE FUNCTION shell.render_piece(r shell.listing_row) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    c shell.commands := r.c;
    piece_end bigint := r.piece_from + octet_length(r.piece);
    html text;
BEGIN
    -- render_command shows c.output when it is set: the piece stands in
    -- for the whole output.
    c.output := r.piece;
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

-- The commands of a page of latest_output, oldest first.
CREATE FUNCTION shell.latest_page(p_session_id uuid, p_since_id bigint, p_limit integer, p_before_id bigint)
RETURNS shell.commands[]
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
BEGIN
    PERFORM shell.current_user_id();
    PERFORM shell.check_page(p_since_id, p_limit);
    IF p_before_id IS NOT NULL AND p_before_id <= 0 THEN
        RAISE EXCEPTION 'p_before_id must be a command id' USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT FROM shell.sessions s WHERE s.id = p_session_id) THEN
        PERFORM shell.session_not_found();
    END IF;
    -- Forward from p_since_id (oldest first), or the newest p_limit before
    -- p_before_id (or of all, when both are unset).
    IF p_since_id > 0 AND p_before_id IS NULL THEN
        RETURN ARRAY(SELECT c FROM shell.commands c
                     WHERE c.session_id = p_session_id AND c.id > p_since_id
                     ORDER BY c.id LIMIT p_limit);
    END IF;
    RETURN ARRAY(SELECT page FROM (
                     SELECT c FROM shell.commands c
                     WHERE c.session_id = p_session_id AND c.id > p_since_id
                       AND c.id < coalesce(p_before_id, 9223372036854775807)
                     ORDER BY c.id DESC LIMIT p_limit) page(page)
                 ORDER BY (page).id);
END
$$;

-- The commands of a page of session_changes (oldest first), after the
-- cursor clamped to the session's newest change.
CREATE FUNCTION shell.changes_page(p_session_id uuid, p_after_change bigint, p_limit integer,
                                   OUT commands shell.commands[], OUT after_change bigint)
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
BEGIN
    PERFORM shell.current_user_id();
    PERFORM shell.check_page(p_after_change, p_limit);
    IF NOT EXISTS (SELECT FROM shell.sessions s WHERE s.id = p_session_id) THEN
        PERFORM shell.session_not_found();
    END IF;
    -- A cursor from the future would wait for a change that never comes.
    after_change := least(p_after_change, coalesce(
        (SELECT max(c.change_seq) FROM shell.commands c WHERE c.session_id = p_session_id), 0));
    commands := ARRAY(SELECT page FROM (
                          SELECT c FROM shell.commands c
                          WHERE c.session_id = p_session_id AND c.change_seq > after_change
                          ORDER BY c.change_seq LIMIT p_limit) page(page)
                      ORDER BY (page).id);
END
$$;

DROP FUNCTION shell_api.latest_output_html(uuid, bigint, integer);
DROP FUNCTION shell_api.session_changes_html(uuid, bigint, integer);
DROP FUNCTION shell_api.latest_output(uuid, bigint, integer);
DROP FUNCTION shell_api.session_changes(uuid, bigint, integer);

-- Commands after p_since_id, oldest first; with p_since_id = 0, the last
-- p_limit commands (before p_before_id, if given: "load earlier").
CREATE FUNCTION shell_api.latest_output(p_session_id uuid, p_since_id bigint DEFAULT 0,
                                        p_limit integer DEFAULT 20, p_before_id bigint DEFAULT NULL,
                                        p_output_limit integer DEFAULT 65536)
RETURNS TABLE (id bigint, command text, output text, exit_code integer, status text,
               submitted_at timestamptz, started_at timestamptz, completed_at timestamptz,
               output_offset bigint, output_bytes bigint, output_cut boolean)
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
BEGIN
    PERFORM shell.check_output_limit(p_output_limit);
    RETURN QUERY
    SELECT (r.c).id, r.command, r.piece, (r.c).exit_code, (r.c).status, (r.c).submitted_at,
           (r.c).started_at, (r.c).completed_at, r.piece_from, r.total,
           r.piece_from + octet_length(r.piece) < r.total
    FROM shell.listing(shell.latest_page(p_session_id, p_since_id, p_limit, p_before_id),
                       p_output_limit) r;
END
$$;

-- The change cursor: commands whose status or output changed after
-- p_after_change, oldest first. With p_tail, a row's output is only what
-- arrived after p_after_change (from output_offset on).
CREATE FUNCTION shell_api.session_changes(p_session_id uuid, p_after_change bigint DEFAULT 0,
                                          p_limit integer DEFAULT 100, p_tail boolean DEFAULT false,
                                          p_output_limit integer DEFAULT 65536)
RETURNS TABLE (id bigint, command text, output text, exit_code integer, status text, reason text,
               submitted_at timestamptz, started_at timestamptz, completed_at timestamptz,
               duration_ms integer, change_seq bigint,
               output_offset bigint, output_bytes bigint, output_cut boolean)
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    page record;
BEGIN
    PERFORM shell.check_output_limit(p_output_limit);
    page := shell.changes_page(p_session_id, p_after_change, p_limit);
    RETURN QUERY
    SELECT (r.c).id, r.command, r.piece, (r.c).exit_code, (r.c).status, (r.c).reason,
           (r.c).submitted_at, (r.c).started_at, (r.c).completed_at, (r.c).duration_ms,
           (r.c).change_seq, r.piece_from, r.total, r.piece_from + octet_length(r.piece) < r.total
    FROM shell.listing(page.commands, p_output_limit,
                       CASE WHEN p_tail THEN page.after_change END) r;
END
$$;

CREATE FUNCTION shell_api.latest_output_html(p_session_id uuid, p_since_id bigint DEFAULT 0,
                                             p_limit integer DEFAULT 20, p_before_id bigint DEFAULT NULL,
                                             p_output_limit integer DEFAULT 65536)
RETURNS shell_api."text/html"
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
BEGIN
    PERFORM shell.check_output_limit(p_output_limit);
    RETURN shell.render_listing(ARRAY(SELECT shell.listing(
        shell.latest_page(p_session_id, p_since_id, p_limit, p_before_id), p_output_limit)));
END
$$;

CREATE FUNCTION shell_api.session_changes_html(p_session_id uuid, p_after_change bigint DEFAULT 0,
                                               p_limit integer DEFAULT 100, p_tail boolean DEFAULT false,
                                               p_output_limit integer DEFAULT 65536)
RETURNS shell_api."text/html"
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    page record;
BEGIN
    PERFORM shell.check_output_limit(p_output_limit);
    page := shell.changes_page(p_session_id, p_after_change, p_limit);
    RETURN shell.render_listing(ARRAY(SELECT shell.listing(
        page.commands, p_output_limit, CASE WHEN p_tail THEN page.after_change END)));
END
$$;

-- A command's whole output, a page at a time: bytes [p_offset, p_offset +
-- p_limit) of its UTF-8 (cut back to a character; as JSON, within the
-- listing budget). next_offset continues; it equals output_bytes at the end
-- (of what has arrived so far, while the command runs).
CREATE FUNCTION shell_api.read_output(p_command_id bigint, p_offset bigint DEFAULT 0,
                                      p_limit integer DEFAULT 1048576)
RETURNS TABLE (command_id bigint, output_offset bigint, output text, next_offset bigint,
               output_bytes bigint, status text)
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    c shell.commands;
    p record;
    budget integer := shell.listing_budget();
    cost bigint;
BEGIN
    PERFORM shell.current_user_id();
    SELECT * INTO c FROM shell.commands x WHERE x.id = p_command_id;  -- row-level security: the caller's
    IF c.id IS NULL THEN
        PERFORM shell.command_not_found();
    END IF;
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND budget THEN
        RAISE EXCEPTION 'p_limit must be between 1 and % bytes', budget USING ERRCODE = '22023';
    END IF;
    SELECT o.total INTO p FROM shell.output_piece(c, 0, 0) o;
    IF p_offset IS NULL OR p_offset < 0 OR p_offset > p.total THEN
        RAISE EXCEPTION 'p_offset must be between 0 and % (the output''s size in bytes)', p.total
            USING ERRCODE = '22023', HINT = 'Continue from the next_offset of the page before.';
    END IF;
    SELECT * INTO p FROM shell.output_piece(c, p_offset, p_limit) o;
    cost := octet_length(to_json(p.piece)::text);
    WHILE cost > budget LOOP
        p.piece := shell.utf8_slice(p.piece, 0, octet_length(p.piece) * budget / cost);
        cost := octet_length(to_json(p.piece)::text);
    END LOOP;
    RETURN QUERY SELECT c.id, p.piece_from, p.piece, p.piece_from + octet_length(p.piece), p.total, c.status;
END
$$;

-- Output chunks remember their change; p_notify => false leaves listeners
-- unwoken (announce_output wakes them later).
DROP FUNCTION shell.append_output(bigint, text, integer, integer, text);
CREATE FUNCTION shell.append_output(p_command_id bigint, p_worker_id text, p_attempt integer,
                                    p_seq integer, p_data text, p_notify boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    lease record;
BEGIN
    PERFORM set_config('shell.quiet', CASE WHEN p_notify THEN '' ELSE 'on' END, true);
    lease := shell.leased_command(p_command_id, p_worker_id, p_attempt, ARRAY['running']);
    PERFORM set_config('shell.quiet', '', true);
    INSERT INTO shell.output_chunks (command_id, seq, data, change_seq)
    VALUES (p_command_id, p_seq, p_data, lease.change)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        UPDATE shell.commands c SET output_bytes = c.output_bytes + octet_length(p_data),
            change_seq = lease.change
        WHERE c.id = p_command_id;
    END IF;
END
$$;

-- Tells listeners that a running command's session changed (output
-- appended quietly since the last notification).
CREATE FUNCTION shell.announce_output(p_command_id bigint, p_worker_id text, p_attempt integer)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    held shell.commands;
BEGIN
    SELECT * INTO held FROM shell.commands c WHERE c.id = p_command_id;
    IF held.id IS NULL OR held.worker_id IS DISTINCT FROM p_worker_id
       OR held.attempts IS DISTINCT FROM p_attempt OR held.status <> 'running' THEN
        PERFORM shell.lease_lost(p_command_id, p_worker_id, p_attempt, held);
    END IF;
    PERFORM pg_notify('shell_changes', held.session_id::text);
END
$$;

CREATE OR REPLACE FUNCTION shell.notify_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = '' AS $$
BEGIN
    IF coalesce(current_setting('shell.quiet', true), '') <> 'on' THEN
        PERFORM pg_notify('shell_changes', NEW.session_id::text);
    END IF;
    RETURN NULL;
END
$$;
