-- The workspace: a session's files live here (DESIGN.md §9), the executor
-- hosts' volumes are only caches of them.
--
-- Git-like and content-addressed:
--   blob  a file's bytes, keyed by their SHA-256, stored in chunks of at most
--         4 MiB (never one giant value) and shared by every tree that holds it;
--   tree  one directory: its entries (name, kind, mode, size, object, target),
--         keyed by shell.tree_hash of those entries, so an unchanged subtree
--         keeps its hash and a command that changes one file rewrites only
--         the trees on that file's path;
--   root  the tree of a session's home. Each command records the root it
--         started from and the one it left (root_before/root_after); the new
--         root becomes the session's in the same transaction that completes
--         the command, and both are facts of its signed result record.
-- A directory's size is the sum of the sizes of the files below it, so a
-- root's size is the session's logical bytes.

CREATE TABLE shell.blobs (
    sha256     text PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size       bigint NOT NULL CHECK (size >= 0),
    chunks     integer NOT NULL CHECK (chunks >= 0),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE shell.blob_chunks (
    sha256 text NOT NULL REFERENCES shell.blobs (sha256) ON DELETE CASCADE,
    seq    integer NOT NULL CHECK (seq >= 0),
    data   bytea NOT NULL CHECK (octet_length(data) <= 4194304),
    PRIMARY KEY (sha256, seq)
);
CREATE TABLE shell.trees (
    hash       text PRIMARY KEY CHECK (hash ~ '^[0-9a-f]{64}$'),
    size       bigint NOT NULL CHECK (size >= 0),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE shell.tree_entries (
    tree   text NOT NULL REFERENCES shell.trees (hash) ON DELETE CASCADE,
    name   text NOT NULL CHECK (name NOT IN ('', '.', '..') AND strpos(name, '/') = 0
                                AND octet_length(name) <= 255),
    kind   text NOT NULL CHECK (kind IN ('file', 'dir', 'symlink')),
    mode   integer NOT NULL CHECK (mode BETWEEN 0 AND 4095),
    size   bigint NOT NULL CHECK (size >= 0),
    object text CHECK ((kind = 'symlink') = (object IS NULL)),  -- blob (file) or tree (dir)
    target text CHECK ((kind = 'symlink') = (target IS NOT NULL)),
    PRIMARY KEY (tree, name)
);
-- Retention walks from trees to what they reach.
CREATE INDEX tree_entries_object ON shell.tree_entries (object) WHERE object IS NOT NULL;

ALTER TABLE shell.blobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE shell.blob_chunks ENABLE ROW LEVEL SECURITY;
ALTER TABLE shell.trees ENABLE ROW LEVEL SECURITY;
ALTER TABLE shell.tree_entries ENABLE ROW LEVEL SECURITY;

-- The hash of a tree, from its entries as a JSON array of objects with the
-- keys of shell.tree_entries. Each entry contributes
--   "<kind> <mode> <size> <object>" NUL <name> NUL <target> NUL
-- (decimal numbers, empty strings for what is absent), in byte order of the
-- names, after the prefix "tree" NUL. executor/workspace/tree.py computes the
-- same bytes; a tree an executor sends is stored only if both agree.
CREATE FUNCTION shell.tree_hash(p_entries jsonb) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT encode(sha256('\x7472656500'::bytea || coalesce(string_agg(
        convert_to(format('%s %s %s %s', e ->> 'kind', e ->> 'mode', e ->> 'size', coalesce(e ->> 'object', '')), 'UTF8')
        || '\x00'::bytea || convert_to(e ->> 'name', 'UTF8') || '\x00'::bytea
        || convert_to(coalesce(e ->> 'target', ''), 'UTF8') || '\x00'::bytea,
        ''::bytea ORDER BY convert_to(e ->> 'name', 'UTF8')), ''::bytea)), 'hex')
    FROM jsonb_array_elements(p_entries) e
$$;

CREATE FUNCTION shell.empty_tree() RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT shell.tree_hash('[]'::jsonb)
$$;
INSERT INTO shell.trees (hash, size) VALUES (shell.empty_tree(), 0);

ALTER TABLE shell.sessions ADD COLUMN root text REFERENCES shell.trees (hash);
-- New sessions start empty. Sessions from before the workspace keep NULL:
-- their next command imports the files of the volume it finds.
-- (A constant, not a call: a default is evaluated before privileges are checked.)
DO $$
BEGIN
    EXECUTE format('ALTER TABLE shell.sessions ALTER COLUMN root SET DEFAULT %L', shell.empty_tree());
END
$$;
ALTER TABLE shell.commands
    ADD COLUMN root_before text REFERENCES shell.trees (hash),
    ADD COLUMN root_after  text REFERENCES shell.trees (hash),
    -- An upload's history entry: {"path", "sha256", "size", "mode"}. It is
    -- applied by the database, not run in a container.
    ADD COLUMN upload      jsonb;

-- Stores one tree (children must exist) and returns its hash. Idempotent.
CREATE FUNCTION shell.put_tree(p_entries jsonb) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    h text := shell.tree_hash(p_entries);
    bad jsonb;
BEGIN
    -- Found again: renewed, so retention's grace period protects it too.
    UPDATE shell.trees t SET created_at = now() WHERE t.hash = h;
    IF FOUND THEN
        RETURN h;
    END IF;
    SELECT e INTO bad FROM jsonb_array_elements(p_entries) e
    WHERE NOT CASE e ->> 'kind'
        WHEN 'file' THEN EXISTS (SELECT FROM shell.blobs b WHERE b.sha256 = e ->> 'object'
                                 AND b.size = (e ->> 'size')::bigint
                                 AND (SELECT count(*) FROM shell.blob_chunks k WHERE k.sha256 = b.sha256) = b.chunks)
        WHEN 'dir' THEN EXISTS (SELECT FROM shell.trees t WHERE t.hash = e ->> 'object'
                                AND t.size = (e ->> 'size')::bigint)
        WHEN 'symlink' THEN (e ->> 'size')::bigint = 0
        ELSE false END
    LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'tree entry % refers to nothing stored', bad ->> 'name' USING ERRCODE = '22023',
            DETAIL = left(bad::text, 500), HINT = 'Store blobs and subtrees before the trees holding them.';
    END IF;
    INSERT INTO shell.trees (hash, size)
    VALUES (h, (SELECT coalesce(sum((e ->> 'size')::bigint), 0) FROM jsonb_array_elements(p_entries) e));
    INSERT INTO shell.tree_entries (tree, name, kind, mode, size, object, target)
    SELECT h, e ->> 'name', e ->> 'kind', (e ->> 'mode')::integer, (e ->> 'size')::bigint,
           e ->> 'object', e ->> 'target'
    FROM jsonb_array_elements(p_entries) e;
    RETURN h;
EXCEPTION WHEN unique_violation THEN
    -- Stored concurrently by another executor: same hash, same content.
    RETURN h;
END
$$;

-- Stores several trees, children before parents; returns their hashes in order.
CREATE FUNCTION shell.put_trees(p_trees jsonb) RETURNS text[]
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    SELECT coalesce(array_agg(shell.put_tree(t.entries) ORDER BY t.n), '{}')
    FROM jsonb_array_elements(p_trees) WITH ORDINALITY AS t(entries, n)
$$;

-- Which of these blobs are not (completely) stored yet. The ones that are
-- get renewed: the executor is about to refer to them.
CREATE FUNCTION shell.missing_blobs(p_sha256 text[]) RETURNS SETOF text
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    UPDATE shell.blobs b SET created_at = now() WHERE b.sha256 = ANY (p_sha256);
    SELECT h FROM unnest(p_sha256) h
    WHERE NOT EXISTS (SELECT FROM shell.blobs b WHERE b.sha256 = h
                      AND (SELECT count(*) FROM shell.blob_chunks k WHERE k.sha256 = h) = b.chunks)
$$;

-- One chunk of a blob; the blob row comes with its first call (an empty
-- blob has no chunks: p_chunks 0 stores only the row). Idempotent, so an
-- executor retrying after an outage stores each chunk once.
CREATE FUNCTION shell.put_blob_chunk(p_sha256 text, p_size bigint, p_chunks integer, p_seq integer,
                                     p_data bytea)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    IF p_chunks > 0 AND p_seq NOT BETWEEN 0 AND p_chunks - 1 THEN
        RAISE EXCEPTION 'chunk % of a blob of % chunks', p_seq, p_chunks USING ERRCODE = '22023';
    END IF;
    INSERT INTO shell.blobs (sha256, size, chunks) VALUES (p_sha256, p_size, p_chunks)
    ON CONFLICT DO NOTHING;
    IF p_chunks > 0 THEN
        INSERT INTO shell.blob_chunks (sha256, seq, data) VALUES (p_sha256, p_seq, p_data)
        ON CONFLICT DO NOTHING;
    END IF;
END
$$;

CREATE FUNCTION shell.blob_chunk(p_sha256 text, p_seq integer) RETURNS bytea
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT k.data FROM shell.blob_chunks k WHERE k.sha256 = p_sha256 AND k.seq = p_seq
$$;

CREATE FUNCTION shell.blob_content(p_sha256 text) RETURNS bytea
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT coalesce(string_agg(k.data, ''::bytea ORDER BY k.seq), ''::bytea)
    FROM shell.blob_chunks k WHERE k.sha256 = p_sha256
$$;

-- Every entry below a root, as paths relative to the home, parents first.
CREATE FUNCTION shell.tree_listing(p_root text)
RETURNS TABLE (path text, kind text, mode integer, size bigint, object text, target text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    WITH RECURSIVE walk (path, kind, mode, size, object, target) AS (
        SELECT e.name, e.kind, e.mode, e.size, e.object, e.target
        FROM shell.tree_entries e WHERE e.tree = p_root
        UNION ALL
        SELECT w.path || '/' || e.name, e.kind, e.mode, e.size, e.object, e.target
        FROM walk w JOIN shell.tree_entries e ON e.tree = w.object
        WHERE w.kind = 'dir'
    )
    SELECT * FROM walk ORDER BY convert_to(walk.path, 'UTF8')
$$;

-- What differs between two roots: one row per path whose entry was added,
-- deleted or changed, parents first. Subtrees with equal hashes are never
-- entered, so the cost is that of the difference. A directory added or
-- deleted brings all of its entries; a directory whose contents changed
-- appears only if its own mode changed.
CREATE FUNCTION shell.tree_diff(p_old text, p_new text)
RETURNS TABLE (path text, change text, old_kind text, old_object text,
               kind text, mode integer, size bigint, object text, target text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    WITH RECURSIVE pairs (path, o_kind, o_mode, o_object, o_target, n_kind, n_mode, n_size, n_object, n_target) AS (
        SELECT coalesce(n.name, o.name), o.kind, o.mode, o.object, o.target,
               n.kind, n.mode, n.size, n.object, n.target
        FROM (SELECT * FROM shell.tree_entries e WHERE e.tree = p_old) o
        FULL JOIN (SELECT * FROM shell.tree_entries e WHERE e.tree = p_new) n ON n.name = o.name
        WHERE p_old IS DISTINCT FROM p_new
        UNION ALL
        SELECT p.path || '/' || coalesce(sub.n_name, sub.o_name), sub.o_kind, sub.o_mode, sub.o_object, sub.o_target,
               sub.n_kind, sub.n_mode, sub.n_size, sub.n_object, sub.n_target
        FROM pairs p
        CROSS JOIN LATERAL (
            SELECT o.name AS o_name, o.kind AS o_kind, o.mode AS o_mode, o.object AS o_object, o.target AS o_target,
                   n.name AS n_name, n.kind AS n_kind, n.mode AS n_mode, n.size AS n_size,
                   n.object AS n_object, n.target AS n_target
            FROM (SELECT * FROM shell.tree_entries e WHERE p.o_kind = 'dir' AND e.tree = p.o_object) o
            FULL JOIN (SELECT * FROM shell.tree_entries e WHERE p.n_kind = 'dir' AND e.tree = p.n_object) n
                ON n.name = o.name
        ) sub
        WHERE (p.o_kind = 'dir' OR p.n_kind = 'dir') AND p.o_object IS DISTINCT FROM p.n_object
    )
    SELECT p.path,
           CASE WHEN p.o_kind IS NULL THEN 'added' WHEN p.n_kind IS NULL THEN 'deleted' ELSE 'modified' END,
           p.o_kind, p.o_object, p.n_kind, p.n_mode, p.n_size, p.n_object, p.n_target
    FROM pairs p
    WHERE p.o_kind IS DISTINCT FROM p.n_kind OR p.o_mode IS DISTINCT FROM p.n_mode
       OR p.o_target IS DISTINCT FROM p.n_target
       OR (p.n_kind <> 'dir' AND p.o_object IS DISTINCT FROM p.n_object)
    ORDER BY convert_to(p.path, 'UTF8')
$$;

-- A tenant's path: relative to the home, '/'-separated, no '.', '..' or
-- empty part. Returns its parts, or raises 22023.
CREATE FUNCTION shell.path_parts(p_path text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE SET search_path = '' AS $$
DECLARE
    parts text[];
BEGIN
    IF p_path IS NULL OR p_path = '' OR left(p_path, 1) = '/' OR octet_length(p_path) > 4096 THEN
        RAISE EXCEPTION 'invalid path %', coalesce(quote_literal(left(p_path, 200)), 'NULL') USING ERRCODE = '22023',
            HINT = 'Give a path relative to the session''s home, such as src/main.py.';
    END IF;
    parts := string_to_array(p_path, '/');
    IF EXISTS (SELECT FROM unnest(parts) part WHERE part IN ('', '.', '..') OR octet_length(part) > 255) THEN
        RAISE EXCEPTION 'invalid path %', quote_literal(left(p_path, 200)) USING ERRCODE = '22023',
            DETAIL = 'A path may not contain empty, "." or ".." parts.',
            HINT = 'Give a path relative to the session''s home, such as src/main.py.';
    END IF;
    RETURN parts;
END
$$;

-- The entry at a path below a root (never leaving it: the path is walked
-- one name at a time, symlinks are never followed), or NULL.
CREATE FUNCTION shell.tree_entry(p_root text, p_parts text[]) RETURNS shell.tree_entries
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    found shell.tree_entries;
    at_tree text := p_root;
    i integer;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_parts, 1), 0) LOOP
        SELECT * INTO found FROM shell.tree_entries e WHERE e.tree = at_tree AND e.name = p_parts[i];
        IF found.tree IS NULL OR (i < array_length(p_parts, 1) AND found.kind <> 'dir') THEN
            RETURN NULL;
        END IF;
        at_tree := found.object;
    END LOOP;
    RETURN found;
END
$$;

-- The root after putting p_entry (an object as in shell.tree_hash; NULL
-- deletes) at a path below p_root, creating directories on the way.
CREATE FUNCTION shell.tree_put_path(p_root text, p_parts text[], p_entry jsonb) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    head text := p_parts[1];
    here shell.tree_entries;
    child jsonb;
    entries jsonb;
BEGIN
    SELECT * INTO here FROM shell.tree_entries e WHERE e.tree = p_root AND e.name = head;
    IF array_length(p_parts, 1) = 1 THEN
        IF here.kind = 'dir' AND p_entry IS NOT NULL THEN
            RAISE EXCEPTION '% is a directory', head USING ERRCODE = '22023',
                HINT = 'Give the path of a file inside it, or another name.';
        END IF;
        child := CASE WHEN p_entry IS NULL THEN NULL ELSE p_entry || jsonb_build_object('name', head) END;
    ELSE
        IF here.tree IS NOT NULL AND here.kind <> 'dir' THEN
            RAISE EXCEPTION '% is not a directory', head USING ERRCODE = '22023';
        END IF;
        child := jsonb_build_object('name', head, 'kind', 'dir', 'mode', coalesce(here.mode, 493),
            'object', shell.tree_put_path(coalesce(here.object, shell.empty_tree()), p_parts[2:], p_entry));
        child := child || jsonb_build_object('size', (SELECT t.size FROM shell.trees t WHERE t.hash = child ->> 'object'));
    END IF;
    SELECT coalesce(jsonb_agg(to_jsonb(e) - 'tree'), '[]'::jsonb) INTO entries
    FROM shell.tree_entries e WHERE e.tree = p_root AND e.name <> head;
    IF child IS NOT NULL THEN
        entries := entries || jsonb_build_array(child);
    END IF;
    RETURN shell.put_tree(entries);
END
$$;

-- Bytes a user's sessions hold (their roots' logical sizes).
CREATE FUNCTION shell.user_file_bytes(p_user_id uuid) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT coalesce(sum(t.size), 0) FROM shell.sessions s JOIN shell.trees t ON t.hash = s.root
    WHERE s.user_id = p_user_id
$$;

ALTER TABLE shell.users ADD COLUMN max_file_bytes bigint NOT NULL DEFAULT 1073741824
    CHECK (max_file_bytes >= 0);

-- Result records, version 2: the facts also hold the roots before and after.
-- Version 1 records (before the workspace) are checked against the version
-- 1 facts by `pg-shell audit verify`.
CREATE OR REPLACE FUNCTION shell.result_facts(c shell.commands) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT jsonb_build_object(
        'command_id', c.id, 'session_id', c.session_id::text, 'user_id', c.user_id::text,
        'command_sha256', shell.sha256_hex(c.command), 'status', c.status,
        'exit_code', c.exit_code, 'reason', c.reason, 'truncated', c.truncated,
        'output_sha256', shell.sha256_hex(coalesce(c.output, '')),
        'cwd_before', c.cwd_before, 'env_before', c.env_before,
        'cwd_after', c.cwd_after, 'env_after', c.env_after,
        'image_digest', c.image_digest, 'worker_id', c.worker_id, 'attempt', c.attempts,
        'duration_ms', c.duration_ms, 'root_before', c.root_before, 'root_after', c.root_after)
$$;

CREATE OR REPLACE FUNCTION shell.chain_result(p_command_id bigint, p_record text DEFAULT NULL,
                                              p_signature text DEFAULT NULL, p_key_id text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SET search_path = '' AS $$
DECLARE
    c shell.commands;
    rec text := p_record;
    facts jsonb;
    claimed jsonb;
    field text;
    prev text;
    seq bigint;
BEGIN
    SELECT * INTO c FROM shell.commands WHERE id = p_command_id;
    facts := shell.result_facts(c);
    IF rec IS NULL THEN
        rec := (facts || jsonb_build_object(
            'v', 2, 'signer', 'database', 'started_at', shell.utc_text(c.started_at),
            'finished_at', shell.utc_text(c.completed_at)))::text;
    ELSE
        BEGIN
            claimed := rec::jsonb;
        EXCEPTION WHEN others THEN
            RAISE EXCEPTION 'result record is not JSON' USING ERRCODE = '22023';
        END;
        IF jsonb_typeof(claimed) <> 'object' THEN
            RAISE EXCEPTION 'result record is not a JSON object' USING ERRCODE = '22023';
        END IF;
        FOR field IN SELECT jsonb_object_keys(facts) LOOP
            IF claimed -> field IS DISTINCT FROM facts -> field THEN
                RAISE EXCEPTION 'result record disagrees with the command on %', field
                    USING ERRCODE = '22023',
                    DETAIL = format('record says %s, the command has %s',
                                    coalesce((claimed -> field)::text, 'nothing'), (facts -> field)::text);
            END IF;
        END LOOP;
        IF p_signature IS NULL OR p_signature !~ '^[0-9a-f]{128}$'
           OR claimed ->> 'signer' IS DISTINCT FROM p_key_id
           OR NOT EXISTS (SELECT FROM shell.signing_keys k WHERE k.key_id = p_key_id) THEN
            RAISE EXCEPTION 'result record is not signed by a registered key' USING ERRCODE = '22023',
                HINT = 'Register the key with shell.register_signing_key first.';
        END IF;
    END IF;
    SELECT l.chain_head INTO prev FROM shell.lanes l WHERE l.session_id = c.session_id;
    UPDATE shell.lanes l SET chain_seq = l.chain_seq + 1, chain_head = shell.sha256_hex(prev || rec)
    WHERE l.session_id = c.session_id RETURNING l.chain_seq INTO seq;
    UPDATE shell.commands SET result_record = rec, signature = p_signature,
        key_id = CASE WHEN p_record IS NULL THEN NULL ELSE p_key_id END,
        chain_seq = seq, chain_prev = prev, chain_hash = shell.sha256_hex(prev || rec)
    WHERE id = p_command_id;
END
$$;

-- Which host's copy of the session holds its current root (a hint for
-- claiming: that host runs the next command without restoring).
ALTER TABLE shell.lanes ADD COLUMN cached_on text;

-- Claiming also hands over the root the command starts from, and whether
-- it is an upload to apply rather than a command to run. It prefers the
-- host whose copy is current: another host leaves such a session alone for
-- p_grace_ms after it became ready, and then takes it like any other.
DROP FUNCTION shell.claim_commands(text, integer, integer);
CREATE FUNCTION shell.claim_commands(p_worker_id text, p_limit integer, p_lease_seconds integer DEFAULT 30,
                                     p_host text DEFAULT NULL, p_grace_ms integer DEFAULT 0)
RETURNS TABLE (command_id bigint, session_id uuid, user_id uuid, command text, cwd text, env jsonb,
               attempt integer, image_digest text, root text, upload jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
#variable_conflict use_column
DECLARE
    lane record;
    head_id bigint;
    seq bigint;
    claimed integer := 0;
    scanned integer := 0;
    -- Read with FETCH, one lane at a time, so only the lanes examined are
    -- locked: a FOR loop prefetches rows and would lock lanes it never
    -- claims, holding other sessions back until this transaction ends.
    ready_lanes CURSOR FOR
        SELECT l.session_id, l.user_id, l.cached_on, l.ready_since FROM shell.lanes l
        WHERE l.pending > 0 AND l.active_command_id IS NULL
        ORDER BY l.ready_since
        FOR UPDATE SKIP LOCKED;
BEGIN
    PERFORM shell.check_worker(p_worker_id, p_lease_seconds);
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 1000' USING ERRCODE = '22023';
    END IF;
    IF p_grace_ms IS NULL OR p_grace_ms NOT BETWEEN 0 AND 10000 THEN
        RAISE EXCEPTION 'p_grace_ms must be between 0 and 10000' USING ERRCODE = '22023';
    END IF;
    OPEN ready_lanes;
    LOOP
        -- Lanes skipped for a user's quota stay locked until commit; bound
        -- the scan so one tenant's backlog cannot make a claim expensive.
        EXIT WHEN claimed >= p_limit OR scanned >= p_limit * 4 + 32;
        FETCH ready_lanes INTO lane;
        EXIT WHEN NOT FOUND;
        scanned := scanned + 1;
        CONTINUE WHEN lane.cached_on IS DISTINCT FROM p_host AND lane.cached_on IS NOT NULL
                  AND lane.ready_since > clock_timestamp() - make_interval(secs => p_grace_ms / 1000.0);
        -- One claimer at a time per user, so max_running holds under
        -- concurrency; a user being claimed elsewhere is simply skipped.
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(hashtextextended('shell.user:' || lane.user_id, 0));
        IF (SELECT count(*) FROM shell.commands c
            WHERE c.user_id = lane.user_id AND c.status IN ('claimed', 'running'))
           >= (SELECT u.max_running FROM shell.users u WHERE u.id = lane.user_id) THEN
            -- Behind the others: a tenant at its quota must not fill the
            -- front of every scan and starve other tenants' sessions.
            UPDATE shell.lanes l SET ready_since = now() WHERE l.session_id = lane.session_id;
            CONTINUE;
        END IF;
        SELECT c.id INTO head_id FROM shell.commands c
        WHERE c.session_id = lane.session_id AND c.status = 'pending'
        ORDER BY c.id LIMIT 1;
        UPDATE shell.lanes l SET pending = l.pending - 1, active_command_id = head_id,
            change_seq = l.change_seq + 1
        WHERE l.session_id = lane.session_id RETURNING l.change_seq INTO seq;
        RETURN QUERY
        UPDATE shell.commands c SET status = 'claimed', worker_id = p_worker_id,
            attempts = c.attempts + 1, claimed_at = now(),
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            cwd_before = s.cwd, env_before = s.env, root_before = s.root, change_seq = seq
        FROM shell.sessions s
        WHERE c.id = head_id AND s.id = c.session_id
        RETURNING c.id, c.session_id, c.user_id, c.command, c.cwd_before, c.env_before, c.attempts,
                  c.image_digest, c.root_before, c.upload;
        claimed := claimed + 1;
    END LOOP;
    CLOSE ready_lanes;
END
$$;

-- Ends a claimed or running command with its result and saves the shell
-- state it left behind (already validated by the executor) as the
-- session's state. p_record is the executor's signed result record; it must
-- agree with the other parameters and the stored output (22023 otherwise).
-- The files the command left are the record's root_after, whose trees the
-- executor stored first: the session's root moves in this transaction.
CREATE OR REPLACE FUNCTION shell.complete_command(
    p_command_id bigint, p_worker_id text, p_attempt integer,
    p_status text, p_exit_code integer, p_reason text, p_truncated boolean,
    p_cwd text DEFAULT NULL, p_env jsonb DEFAULT NULL, p_duration_ms integer DEFAULT NULL,
    p_record text DEFAULT NULL, p_signature text DEFAULT NULL, p_key_id text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    lease record := shell.leased_command(p_command_id, p_worker_id, p_attempt, ARRAY['claimed', 'running']);
    cmd shell.commands := lease.leased;
    new_cwd text := coalesce(p_cwd, cmd.cwd_before);
    new_env jsonb := coalesce(p_env, cmd.env_before);
    new_root text;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'invalid final status %', p_status USING ERRCODE = '22023';
    END IF;
    IF new_cwd NOT LIKE '/%' OR jsonb_typeof(new_env) <> 'object'
       OR EXISTS (SELECT FROM jsonb_each(new_env) e WHERE jsonb_typeof(e.value) <> 'string') THEN
        RAISE EXCEPTION 'invalid shell state' USING ERRCODE = '22023',
            DETAIL = 'cwd must be absolute and env an object of strings';
    END IF;
    BEGIN
        new_root := coalesce(p_record::jsonb ->> 'root_after', cmd.root_before);
    EXCEPTION WHEN others THEN
        RAISE EXCEPTION 'result record is not JSON' USING ERRCODE = '22023';
    END;
    IF new_root IS NOT NULL AND NOT EXISTS (SELECT FROM shell.trees t WHERE t.hash = new_root) THEN
        RAISE EXCEPTION 'root % is not stored', new_root USING ERRCODE = '22023',
            HINT = 'Store the trees and blobs of the new root before completing.';
    END IF;
    UPDATE shell.commands c SET status = p_status, exit_code = p_exit_code, reason = p_reason,
        truncated = coalesce(p_truncated, false), completed_at = now(), duration_ms = p_duration_ms,
        cwd_after = new_cwd, env_after = new_env, root_after = new_root, lease_expires_at = NULL,
        output = shell.output_of(cmd), change_seq = lease.change
    WHERE c.id = p_command_id;
    PERFORM shell.chain_result(p_command_id, p_record, p_signature, p_key_id);
    UPDATE shell.sessions s SET cwd = new_cwd, env = new_env, root = new_root, last_active_at = now()
    WHERE s.id = cmd.session_id;
    -- The record's "host" (not a fact, a hint): whose copy now holds the root.
    UPDATE shell.lanes l SET active_command_id = NULL, cached_on = p_record::jsonb ->> 'host',
        ready_since = CASE WHEN l.pending > 0 THEN now() ELSE l.ready_since END
    WHERE l.session_id = cmd.session_id;
END
$$;

-- A file put into a session's tree, with the checks every tenant write has:
-- a valid path, within the tenant's files quota (PT413 otherwise). Returns
-- the new root.
CREATE FUNCTION shell.put_file(p_session shell.sessions, p_root text, p_upload jsonb) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    new_root text;
    quota bigint;
    used bigint;
BEGIN
    new_root := shell.tree_put_path(coalesce(p_root, shell.empty_tree()),
        shell.path_parts(p_upload ->> 'path'),
        jsonb_build_object('kind', 'file', 'mode', (p_upload ->> 'mode')::integer,
                           'size', (p_upload ->> 'size')::bigint, 'object', p_upload ->> 'sha256'));
    SELECT u.max_file_bytes INTO quota FROM shell.users u WHERE u.id = p_session.user_id;
    used := shell.user_file_bytes(p_session.user_id)
            - coalesce((SELECT t.size FROM shell.trees t WHERE t.hash = p_root), 0)
            + (SELECT t.size FROM shell.trees t WHERE t.hash = new_root);
    IF used > quota THEN
        RAISE EXCEPTION 'files quota reached (% of % bytes)', used, quota USING ERRCODE = 'PT413',
            HINT = 'Delete files in the session, or ask an administrator to raise max_file_bytes.';
    END IF;
    RETURN new_root;
END
$$;

-- An upload in a replay is applied by the database when its turn comes:
-- the executor that claimed it calls this instead of starting a container.
CREATE FUNCTION shell.complete_upload(p_command_id bigint, p_worker_id text, p_attempt integer)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    lease record := shell.leased_command(p_command_id, p_worker_id, p_attempt, ARRAY['claimed']);
    cmd shell.commands := lease.leased;
    new_root text;
    failure text;
BEGIN
    IF cmd.upload IS NULL THEN
        RAISE EXCEPTION 'command % is not an upload', p_command_id USING ERRCODE = '22023';
    END IF;
    BEGIN
        new_root := shell.put_file((SELECT s FROM shell.sessions s WHERE s.id = cmd.session_id),
                                   cmd.root_before, cmd.upload);
    EXCEPTION WHEN sqlstate '22023' OR sqlstate 'PT413' THEN
        failure := SQLERRM;
        new_root := cmd.root_before;
    END;
    UPDATE shell.commands c SET status = CASE WHEN failure IS NULL THEN 'done' ELSE 'failed' END,
        exit_code = CASE WHEN failure IS NULL THEN 0 END, reason = failure,
        started_at = now(), completed_at = now(), duration_ms = 0, output = '',
        cwd_after = cmd.cwd_before, env_after = cmd.env_before, root_after = new_root,
        lease_expires_at = NULL, change_seq = lease.change
    WHERE c.id = p_command_id;
    PERFORM shell.chain_result(p_command_id);
    UPDATE shell.sessions s SET root = new_root, last_active_at = now() WHERE s.id = cmd.session_id;
    UPDATE shell.lanes l SET active_command_id = NULL, cached_on = NULL,
        ready_since = CASE WHEN l.pending > 0 THEN now() ELSE l.ready_since END
    WHERE l.session_id = cmd.session_id;
END
$$;

DROP FUNCTION shell.enqueue(shell.sessions, text, uuid, bigint, text);
CREATE FUNCTION shell.enqueue(
    p_session shell.sessions, p_command text,
    p_replay_run_id uuid DEFAULT NULL, p_replay_of bigint DEFAULT NULL, p_image_digest text DEFAULT NULL,
    p_upload jsonb DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    quota integer;
    seq bigint;
    new_id bigint;
BEGIN
    SELECT u.max_queued INTO quota FROM shell.users u WHERE u.id = p_session.user_id FOR NO KEY UPDATE;
    IF (SELECT count(*) FROM shell.commands c
        WHERE c.user_id = p_session.user_id AND c.status IN ('pending', 'claimed', 'running')) >= quota THEN
        RAISE EXCEPTION 'command queue quota reached (% unfinished commands)', quota
            USING ERRCODE = 'PT429', HINT = 'Wait for commands to finish, or cancel some.';
    END IF;
    UPDATE shell.lanes l SET
        ready_since = CASE WHEN l.pending = 0 AND l.active_command_id IS NULL THEN now() ELSE l.ready_since END,
        pending = l.pending + 1,
        change_seq = l.change_seq + 1
    WHERE l.session_id = p_session.id
    RETURNING l.change_seq INTO seq;
    INSERT INTO shell.commands (session_id, user_id, command, replay_run_id, replay_of_command_id,
                                image_digest, change_seq, upload)
    VALUES (p_session.id, p_session.user_id, p_command, p_replay_run_id, p_replay_of, p_image_digest, seq,
            p_upload)
    RETURNING id INTO new_id;
    UPDATE shell.sessions s SET last_active_at = now() WHERE s.id = p_session.id;
    -- A constant payload: PostgreSQL folds identical notifications of one
    -- transaction into one, and executors treat it as a hint to claim.
    PERFORM pg_notify('shell_commands', '');
    RETURN new_id;
END
$$;

CREATE OR REPLACE FUNCTION shell_api.fork_session(p_source_command_id bigint) RETURNS uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    source shell.commands := shell.owned_command(p_source_command_id);
    new_id uuid;
BEGIN
    IF source.cwd_after IS NULL THEN
        RAISE EXCEPTION 'command % has not finished running', p_source_command_id
            USING ERRCODE = '22023', HINT = 'Fork from a command that ran to completion.';
    END IF;
    new_id := shell.new_session(source.user_id, 'fork of command ' || source.id,
                                source.cwd_after, source.env_after, p_forked_from => source.id);
    -- The files right after the command (a command that did not complete
    -- left them as they were before it).
    UPDATE shell.sessions s SET root = coalesce(source.root_after, source.root_before) WHERE s.id = new_id;
    RETURN new_id;
END
$$;

-- Re-queues the session's original commands from p_start_id on, in a new
-- session that starts from the state and files they started from; its id
-- is the replay run id. Uploads are replayed as uploads.
CREATE OR REPLACE FUNCTION shell_api.replay_session(p_session_id uuid, p_start_id bigint) RETURNS uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    source shell.sessions := shell.owned_session(p_session_id);
    start shell.commands;
    run_id uuid;
    run_session shell.sessions;
    original shell.commands;
BEGIN
    SELECT * INTO start FROM shell.commands c
    WHERE c.id = p_start_id AND c.session_id = source.id AND c.replay_of_command_id IS NULL;
    IF start.id IS NULL THEN
        RAISE EXCEPTION 'command % is not an original command of this session', p_start_id
            USING ERRCODE = '22023', HINT = 'Pass the id of a command submitted to this session.';
    END IF;
    -- Created first, then read: a volatile call in the WHERE clause would run
    -- once per existing session, and its own row is not visible to that query.
    run_id := shell.new_session(  -- the name is cut to stay within 200 characters
        source.user_id, 'replay of ' || left(coalesce(source.name, source.id::text), 150) || ' from ' || start.id,
        coalesce(start.cwd_before, '/home/sandbox'), coalesce(start.env_before, '{}'::jsonb),
        p_replay_of => source.id);
    -- A start command that never ran has no root_before: the files it would
    -- have started from are the root of the last command before it that has one.
    UPDATE shell.sessions s SET root = coalesce(start.root_before,
        (SELECT coalesce(c.root_after, c.root_before) FROM shell.commands c
         WHERE c.session_id = source.id AND c.id < start.id AND coalesce(c.root_after, c.root_before) IS NOT NULL
         ORDER BY c.id DESC LIMIT 1),
        shell.empty_tree())
    WHERE s.id = run_id;
    SELECT * INTO run_session FROM shell.sessions s WHERE s.id = run_id;
    FOR original IN
        SELECT * FROM shell.commands c
        WHERE c.session_id = source.id AND c.id >= p_start_id AND c.replay_of_command_id IS NULL
        ORDER BY c.id
    LOOP
        PERFORM shell.enqueue(run_session, original.command, run_session.id, original.id,
                              original.image_digest, original.upload);
    END LOOP;
    RETURN run_session.id;
END
$$;

-- The audit view gains the roots (version 2 facts).
DROP FUNCTION shell.audit_history(uuid);
CREATE FUNCTION shell.audit_history(p_session_id uuid DEFAULT NULL)
RETURNS TABLE (session_id uuid, command_id bigint, chain_seq bigint, chain_prev text, chain_hash text,
               result_record text, signature text, key_id text, user_id uuid, command text,
               status text, exit_code integer, reason text, truncated boolean, output text,
               cwd_before text, env_before jsonb, cwd_after text, env_after jsonb, image_digest text,
               worker_id text, attempt integer, duration_ms integer, chunks_sha256 text,
               root_before text, root_after text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT c.session_id, c.id, c.chain_seq, c.chain_prev, c.chain_hash, c.result_record, c.signature,
           c.key_id, c.user_id, c.command, c.status, c.exit_code, c.reason, c.truncated, c.output,
           c.cwd_before, c.env_before, c.cwd_after, c.env_after, c.image_digest, c.worker_id,
           c.attempts, c.duration_ms,
           (SELECT shell.sha256_hex(string_agg(o.data, '' ORDER BY o.seq))
            FROM shell.output_chunks o WHERE o.command_id = c.id),
           c.root_before, c.root_after
    FROM shell.commands c
    WHERE (p_session_id IS NULL OR c.session_id = p_session_id)
      AND (c.status IN ('done', 'failed', 'cancelled') OR c.chain_seq IS NOT NULL)
    ORDER BY c.session_id, c.chain_seq NULLS LAST, c.id
$$;

-- The tenant API (DESIGN.md §9). Paths are relative to the session's home.

-- The root a tenant asks about: the session's now, or right after one of
-- its commands.
CREATE FUNCTION shell.root_at(p_session_id uuid, p_command_id bigint) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    s shell.sessions := shell.owned_session(p_session_id);
    c shell.commands;
BEGIN
    IF p_command_id IS NULL THEN
        RETURN coalesce(s.root, shell.empty_tree());
    END IF;
    c := shell.owned_command(p_command_id);
    IF c.session_id <> s.id THEN
        PERFORM shell.command_not_found();
    END IF;
    IF c.status NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'command % has not finished', p_command_id USING ERRCODE = '22023',
            HINT = 'Ask again when it has completed, or leave p_command_id out for the files now.';
    END IF;
    RETURN coalesce(c.root_after, c.root_before, shell.empty_tree());
END
$$;

CREATE FUNCTION shell_api.session_files(p_session_id uuid, p_command_id bigint DEFAULT NULL)
RETURNS TABLE (path text, kind text, mode integer, size bigint, sha256 text, target text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT l.path, l.kind, l.mode, l.size, CASE WHEN l.kind = 'file' THEN l.object END, l.target
    FROM shell.tree_listing(shell.root_at(p_session_id, p_command_id)) l
$$;

-- PostgREST serves a function's result raw when its type is a domain named
-- after the media type the client accepts.
CREATE DOMAIN shell_api."application/octet-stream" AS bytea;

CREATE FUNCTION shell_api.read_file(p_session_id uuid, p_path text, p_command_id bigint DEFAULT NULL)
RETURNS shell_api."application/octet-stream"
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    root text := shell.root_at(p_session_id, p_command_id);
    entry shell.tree_entries := shell.tree_entry(root, shell.path_parts(p_path));
BEGIN
    IF entry.tree IS NULL THEN
        RAISE EXCEPTION 'no such file: %', p_path USING ERRCODE = '22023',
            HINT = 'List the session''s files with session_files.';
    END IF;
    IF entry.kind <> 'file' THEN
        RAISE EXCEPTION '% is a %, not a file', p_path, CASE entry.kind WHEN 'dir' THEN 'directory' ELSE 'symbolic link' END
            USING ERRCODE = '22023';
    END IF;
    RETURN shell.blob_content(entry.object);
END
$$;

-- Empty for a command that changed nothing (or ran before files were kept).
CREATE FUNCTION shell_api.command_changes(p_command_id bigint)
RETURNS TABLE (path text, change text, kind text, size bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    c shell.commands := shell.owned_command(p_command_id);
BEGIN
    IF c.status NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'command % has not finished', p_command_id USING ERRCODE = '22023',
            HINT = 'Its changes are known once it has completed.';
    END IF;
    RETURN QUERY
    SELECT d.path, d.change, coalesce(d.kind, d.old_kind), coalesce(d.size, 0)
    FROM shell.tree_diff(c.root_before, c.root_after) d
    WHERE c.root_after IS NOT NULL AND c.root_before IS NOT NULL;
END
$$;

-- Puts a file into the session's home at once, as an entry of its history
-- (ordered with its commands, chained in the audit log). The session must
-- be idle: a command running meanwhile would not see the file, and its
-- completion would be ordered before it.
CREATE FUNCTION shell_api.upload_file(p_session_id uuid, p_path text, p_content bytea, p_mode integer DEFAULT 420)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    s shell.sessions := shell.owned_session(p_session_id);
    max_upload constant bigint := 67108864;
    chunk constant integer := 4194304;
    digest text;
    upload jsonb;
    new_root text;
    new_id bigint;
    seq bigint;
    n integer;
BEGIN
    PERFORM shell.path_parts(p_path);
    IF p_content IS NULL THEN
        RAISE EXCEPTION 'no content' USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_content) > max_upload THEN
        RAISE EXCEPTION 'file is too large (% bytes)', octet_length(p_content) USING ERRCODE = 'PT413',
            DETAIL = format('An upload may be at most %s bytes.', max_upload);
    END IF;
    IF p_mode IS NULL OR p_mode NOT BETWEEN 0 AND 511 THEN
        RAISE EXCEPTION 'mode must be between 0 and 511 (0o777)' USING ERRCODE = '22023';
    END IF;
    -- Lane first (the lock order of every transition): the session must be idle.
    UPDATE shell.lanes l SET change_seq = l.change_seq + 1 WHERE l.session_id = s.id
    RETURNING l.change_seq INTO seq;
    IF EXISTS (SELECT FROM shell.lanes l WHERE l.session_id = s.id AND (l.pending > 0 OR l.active_command_id IS NOT NULL)) THEN
        RAISE EXCEPTION 'session is busy' USING ERRCODE = 'PT409',
            HINT = 'Upload when its commands have finished.';
    END IF;
    SELECT * INTO s FROM shell.sessions x WHERE x.id = s.id FOR UPDATE;
    digest := encode(sha256(p_content), 'hex');
    n := greatest(1, ceil(octet_length(p_content)::numeric / chunk)::integer);
    IF octet_length(p_content) = 0 THEN
        n := 0;
    END IF;
    INSERT INTO shell.blobs (sha256, size, chunks) VALUES (digest, octet_length(p_content), n) ON CONFLICT DO NOTHING;
    INSERT INTO shell.blob_chunks (sha256, seq, data)
    SELECT digest, i, substring(p_content FROM i * chunk + 1 FOR chunk) FROM generate_series(0, n - 1) i
    ON CONFLICT DO NOTHING;
    upload := jsonb_build_object('path', p_path, 'sha256', digest, 'size', octet_length(p_content), 'mode', p_mode);
    new_root := shell.put_file(s, s.root, upload);
    INSERT INTO shell.commands (session_id, user_id, command, status, submitted_at, claimed_at, started_at,
        completed_at, exit_code, duration_ms, output, cwd_before, env_before, cwd_after, env_after,
        root_before, root_after, upload, change_seq)
    VALUES (s.id, s.user_id, 'upload ' || p_path, 'done', now(), now(), now(), now(), 0, 0, '',
            s.cwd, s.env, s.cwd, s.env, s.root, new_root, upload, seq)
    RETURNING id INTO new_id;
    PERFORM shell.chain_result(new_id);
    UPDATE shell.sessions x SET root = new_root, last_active_at = now() WHERE x.id = s.id;
    UPDATE shell.lanes l SET cached_on = NULL WHERE l.session_id = s.id;  -- no host's copy holds it
    RETURN new_id;
END
$$;

-- Retention of files: trees and blobs that nothing retained reaches any
-- more (no session's root, no remaining command's roots, no pending
-- upload) are deleted. A grace period protects what an executor stored for
-- a command that has not completed yet; storing or finding an object again
-- renews it (put_tree, missing_blobs), so nothing is collected while a
-- command is about to refer to it.
CREATE FUNCTION shell.collect_files(p_grace interval DEFAULT '1 hour', OUT trees bigint, OUT blobs bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    CREATE TEMPORARY TABLE reachable_trees ON COMMIT DROP AS
    WITH RECURSIVE reach (hash) AS (
        SELECT s.root FROM shell.sessions s WHERE s.root IS NOT NULL
        UNION
        SELECT r.root FROM shell.commands c, LATERAL (VALUES (c.root_before), (c.root_after)) r(root)
        WHERE r.root IS NOT NULL
        UNION
        SELECT e.object FROM reach JOIN shell.tree_entries e ON e.tree = reach.hash WHERE e.kind = 'dir'
    )
    SELECT hash FROM reach;
    DELETE FROM shell.trees t
    WHERE t.created_at < now() - p_grace AND t.hash <> shell.empty_tree()
      AND NOT EXISTS (SELECT FROM reachable_trees r WHERE r.hash = t.hash);
    GET DIAGNOSTICS trees = ROW_COUNT;
    DELETE FROM shell.blobs b
    WHERE b.created_at < now() - p_grace
      AND NOT EXISTS (SELECT FROM shell.tree_entries e WHERE e.object = b.sha256 AND e.kind = 'file')
      AND NOT EXISTS (SELECT FROM shell.commands c WHERE c.upload ->> 'sha256' = b.sha256);
    GET DIAGNOSTICS blobs = ROW_COUNT;
END
$$;
