-- Bounded capture and bounded listings (DESIGN.md §9, §12, §14).
--
-- Capture: an executor stores the small files a command changed in batches
-- (shell.put_blobs: one call for up to a thousand of them, where it made two
-- calls per file), and every changed file's bytes are sent, whether or not
-- a blob already holds them (no missing_blobs question first): an answer
-- "already stored", and the upload it saved, would let a tenant time its
-- own commands to learn whether any other tenant stores some content.
-- Storing renews a blob found again, as missing_blobs did, so retention's
-- grace period protects it until the command that refers to it completes.
--
-- Listings: a call costs in proportion to what it returns, never to the
-- size of the tree it lists.
--   * session_files pages the tree with a keyset cursor on the path
--     (p_after: the last path of the previous page; p_limit rows at most,
--     1000 by default). Its order: a directory's entries by the bytes of
--     their names, each directory followed at once by what it holds (so
--     parents come first); the walk reads one index entry per row returned
--     and one per level of the cursor's path.
--   * render_changes (the change summary under a command in the page) reads
--     at most max_counted + 1 changes of the command, found breadth first
--     (shallowest first); past max_counted it says "more than N changes".

-- Byte order of names within a tree, for the keyset walks.
CREATE INDEX tree_entries_name_bytes ON shell.tree_entries (tree, name COLLATE "C");

-- Small blobs, each of at most one chunk (4 MiB), in one call: their
-- SHA-256s and their bytes, in the same order. The database hashes what it
-- is given: a blob is stored under its own hash, whatever the caller says.
-- Idempotent; a blob already stored is renewed (see above).
CREATE FUNCTION shell.put_blobs(p_sha256 text[], p_data bytea[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    bad integer;
BEGIN
    IF cardinality(p_sha256) IS DISTINCT FROM cardinality(p_data) THEN
        RAISE EXCEPTION 'put_blobs needs as many hashes as contents' USING ERRCODE = '22023';
    END IF;
    SELECT i INTO bad FROM generate_subscripts(p_sha256, 1) i
    WHERE p_data[i] IS NULL OR octet_length(p_data[i]) > 4194304
       OR p_sha256[i] IS DISTINCT FROM encode(sha256(p_data[i]), 'hex')
    LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'blob % is not the SHA-256 of its content (or is over 4 MiB)', bad
            USING ERRCODE = '22023', HINT = 'Store larger blobs with put_blob_chunk.';
    END IF;
    INSERT INTO shell.blobs AS b (sha256, size, chunks)
    SELECT DISTINCT ON (h) h, octet_length(d), CASE WHEN octet_length(d) = 0 THEN 0 ELSE 1 END
    FROM unnest(p_sha256, p_data) AS u(h, d)
    ON CONFLICT (sha256) DO UPDATE SET created_at = now();
    INSERT INTO shell.blob_chunks (sha256, seq, data)
    SELECT DISTINCT ON (h) h, 0, d FROM unnest(p_sha256, p_data) AS u(h, d)
    WHERE octet_length(d) > 0
    ON CONFLICT DO NOTHING;
END
$$;

-- One chunk of a blob; the blob row comes with its first call (an empty
-- blob has no chunks: p_chunks 0 stores only the row). Idempotent, so an
-- executor retrying after an outage stores each chunk once. A blob found
-- again is renewed (it used to be, by the missing_blobs question that no
-- longer comes first).
CREATE OR REPLACE FUNCTION shell.put_blob_chunk(p_sha256 text, p_size bigint, p_chunks integer,
                                                p_seq integer, p_data bytea)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    IF p_chunks > 0 AND p_seq NOT BETWEEN 0 AND p_chunks - 1 THEN
        RAISE EXCEPTION 'chunk % of a blob of % chunks', p_seq, p_chunks USING ERRCODE = '22023';
    END IF;
    INSERT INTO shell.blobs (sha256, size, chunks) VALUES (p_sha256, p_size, p_chunks)
    ON CONFLICT (sha256) DO UPDATE SET created_at = now();
    IF p_chunks > 0 THEN
        INSERT INTO shell.blob_chunks (sha256, seq, data) VALUES (p_sha256, p_seq, p_data)
        ON CONFLICT DO NOTHING;
    END IF;
END
$$;

-- Up to p_limit entries below p_root after the path p_after (NULL: from the
-- start), in the order described above. A cursor whose path is gone (the
-- tree is another one now) still pages on from where that path would be.
-- The walk keeps a stack of (tree, path prefix, last name returned) per
-- level and reads the next entry of the top tree with one index probe.
CREATE FUNCTION shell.tree_page(p_root text, p_after text, p_limit integer)
RETURNS TABLE (path text, kind text, mode integer, size bigint, object text, target text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    trees text[] := ARRAY[p_root];
    prefixes text[] := ARRAY[''];
    afters text[] := ARRAY[NULL::text];
    parts text[];
    e shell.tree_entries;
    top integer := 1;
    n integer := 0;
    i integer;
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 1000' USING ERRCODE = '22023';
    END IF;
    IF p_after IS NOT NULL THEN
        parts := shell.path_parts(p_after);
        -- Down the cursor's path: every level resumes after the name taken
        -- there; below an existing directory named by the whole path, its
        -- contents come next.
        FOR i IN 1 .. cardinality(parts) LOOP
            afters[top] := parts[i];
            SELECT * INTO e FROM shell.tree_entries x WHERE x.tree = trees[top] AND x.name = parts[i];
            EXIT WHEN e.tree IS NULL OR e.kind <> 'dir';
            top := top + 1;
            trees[top] := e.object;
            prefixes[top] := prefixes[top - 1] || parts[i] || '/';
            afters[top] := NULL;
        END LOOP;
    END IF;
    WHILE top > 0 AND n < p_limit LOOP
        IF afters[top] IS NULL THEN
            SELECT * INTO e FROM shell.tree_entries x WHERE x.tree = trees[top]
            ORDER BY x.name COLLATE "C" LIMIT 1;
        ELSE
            SELECT * INTO e FROM shell.tree_entries x
            WHERE x.tree = trees[top] AND x.name COLLATE "C" > afters[top]
            ORDER BY x.name COLLATE "C" LIMIT 1;
        END IF;
        IF NOT FOUND THEN
            top := top - 1;  -- this directory is done: back to its parent
            trees := trees[1:top];
            prefixes := prefixes[1:top];
            afters := afters[1:top];
            CONTINUE;
        END IF;
        afters[top] := e.name;
        path := prefixes[top] || e.name;
        kind := e.kind;
        mode := e.mode;
        size := e.size;
        object := e.object;
        target := e.target;
        RETURN NEXT;
        n := n + 1;
        IF e.kind = 'dir' THEN
            top := top + 1;
            trees[top] := e.object;
            prefixes[top] := path || '/';
            afters[top] := NULL;
        END IF;
    END LOOP;
END
$$;

DROP FUNCTION shell_api.session_files(uuid, bigint);

-- The session's files now, or right after one of its commands, a page at a
-- time: p_limit entries (at most 1000) after the path p_after (the last
-- path of the page before; NULL for the first page). A page shorter than
-- p_limit is the last.
CREATE FUNCTION shell_api.session_files(p_session_id uuid, p_command_id bigint DEFAULT NULL,
                                        p_after text DEFAULT NULL, p_limit integer DEFAULT 1000)
RETURNS TABLE (path text, kind text, mode integer, size bigint, sha256 text, target text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT l.path, l.kind, l.mode, l.size, CASE WHEN l.kind = 'file' THEN l.object END, l.target
    FROM shell.tree_page(shell.root_at(p_session_id, p_command_id), p_after, p_limit) l
$$;

-- At most p_limit changes of one of the caller's finished commands:
-- (path, change added/modified/deleted, kind), as shell.tree_diff finds
-- them but shallowest first, and reading no further than the changes it
-- returns: the two versions of a directory are merged by name, one index
-- probe per entry on either side (stopped at the limit), and a subtree
-- whose hash is the same on both sides is never entered. The roots are
-- read from the command itself, the caller's own.
CREATE FUNCTION shell.some_changes(p_command_id bigint, p_limit integer)
RETURNS TABLE (path text, change text, kind text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    c shell.commands := shell.owned_command(p_command_id);
    -- The queue of directory pairs to compare: old tree, new tree (NULL:
    -- absent on that side), and the path prefix of their entries.
    olds text[];
    news text[];
    prefixes text[];
    head integer := 1;
    n integer := 0;
    o shell.tree_entries;  -- the next entry of the old directory (name NULL: none left)
    nw shell.tree_entries;  -- and of the new one
    one_side shell.tree_entries;
    is_new boolean;
BEGIN
    IF c.status NOT IN ('done', 'failed', 'cancelled') OR c.root_before IS NULL
       OR c.root_after IS NULL OR c.root_before = c.root_after OR p_limit < 1 THEN
        RETURN;
    END IF;
    olds := ARRAY[c.root_before];
    news := ARRAY[c.root_after];
    prefixes := ARRAY[''];
    WHILE head <= cardinality(prefixes) AND n < p_limit LOOP
        SELECT * INTO o FROM shell.tree_entries x WHERE x.tree = olds[head]
        ORDER BY x.name COLLATE "C" LIMIT 1;
        SELECT * INTO nw FROM shell.tree_entries x WHERE x.tree = news[head]
        ORDER BY x.name COLLATE "C" LIMIT 1;
        WHILE (o.name IS NOT NULL OR nw.name IS NOT NULL) AND n < p_limit LOOP
            IF o.name IS NOT NULL AND nw.name IS NOT NULL AND o.name = nw.name THEN
                IF o.kind <> nw.kind OR o.mode <> nw.mode OR o.target IS DISTINCT FROM nw.target
                   OR (nw.kind <> 'dir' AND o.object IS DISTINCT FROM nw.object) THEN
                    path := prefixes[head] || nw.name;
                    change := 'modified';
                    kind := nw.kind;
                    RETURN NEXT;
                    n := n + 1;
                END IF;
                IF (o.kind = 'dir' OR nw.kind = 'dir') AND o.object IS DISTINCT FROM nw.object THEN
                    olds := olds || CASE WHEN o.kind = 'dir' THEN o.object END;
                    news := news || CASE WHEN nw.kind = 'dir' THEN nw.object END;
                    prefixes := prefixes || (prefixes[head] || nw.name || '/');
                END IF;
                SELECT * INTO o FROM shell.tree_entries x
                WHERE x.tree = olds[head] AND x.name COLLATE "C" > o.name
                ORDER BY x.name COLLATE "C" LIMIT 1;
                SELECT * INTO nw FROM shell.tree_entries x
                WHERE x.tree = news[head] AND x.name COLLATE "C" > nw.name
                ORDER BY x.name COLLATE "C" LIMIT 1;
                CONTINUE;
            END IF;
            -- An entry on one side only: the smaller name of the two.
            is_new := o.name IS NULL OR (nw.name IS NOT NULL AND nw.name COLLATE "C" < o.name);
            one_side := CASE WHEN is_new THEN nw ELSE o END;
            path := prefixes[head] || one_side.name;
            change := CASE WHEN is_new THEN 'added' ELSE 'deleted' END;
            kind := one_side.kind;
            RETURN NEXT;
            n := n + 1;
            IF one_side.kind = 'dir' THEN
                olds := olds || CASE WHEN NOT is_new THEN one_side.object END;
                news := news || CASE WHEN is_new THEN one_side.object END;
                prefixes := prefixes || (prefixes[head] || one_side.name || '/');
            END IF;
            IF is_new THEN
                SELECT * INTO nw FROM shell.tree_entries x
                WHERE x.tree = news[head] AND x.name COLLATE "C" > nw.name
                ORDER BY x.name COLLATE "C" LIMIT 1;
            ELSE
                SELECT * INTO o FROM shell.tree_entries x
                WHERE x.tree = olds[head] AND x.name COLLATE "C" > o.name
                ORDER BY x.name COLLATE "C" LIMIT 1;
            END IF;
        END LOOP;
        head := head + 1;
    END LOOP;
END
$$;

-- A one-line summary ("2 added, 1 modified, 1 deleted") that opens to the
-- paths, or '' when the command changed nothing. Most commands leave the
-- root as it was: they cost one comparison of two hashes. The others read
-- at most max_counted + 1 changes (shell.some_changes, the caller's own
-- command only, its roots read again, never taken from the row passed in,
-- which a tenant calling this directly could make up); the list shows the
-- first max_listed of them in path order, and past max_counted the summary
-- says "more than max_counted changes" instead of counting on.
CREATE OR REPLACE FUNCTION shell.render_changes(c shell.commands) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    max_listed constant integer := 100;
    max_counted constant integer := 1000;
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
        FROM shell.some_changes(c.id, max_counted + 1) ch
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
    IF total > max_counted THEN
        summary := format('more than %s changes', max_counted);
    END IF;
    RETURN format('<details class="changes"><summary>%s</summary><ul>%s%s</ul></details>',
                  summary, listed,
                  CASE WHEN total > max_counted
                       THEN format('<li class="more">and more than %s others</li>', max_counted - max_listed)
                       WHEN total > max_listed
                       THEN format('<li class="more">and %s more</li>', total - max_listed) ELSE '' END);
END
$$;
