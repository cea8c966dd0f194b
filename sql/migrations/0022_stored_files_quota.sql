-- Stored files under hostile tenants (DESIGN.md §9, §11):
--   1. a tree knows how many entries it holds below it, and its widest
--      directory, so a root's size in entries is read, never walked;
--   2. what each user's kept history holds (sessions' roots, ended commands'
--      roots before and after) is counted as it changes: the distinct trees
--      and blobs a user holds, with reference counts, kept by triggers on
--      shell.commands and shell.sessions. Holding a new root walks only the
--      trees the user did not hold yet (an unchanged subtree keeps its hash,
--      so that is what a command changed), releasing one walks only what
--      nothing else of theirs holds;
--   3. the files quota (max_file_bytes) counts those bytes: every distinct
--      blob once, and every entry of every distinct tree at about what it
--      takes in the database. Caps on entries per directory and per root.
--      complete_command fails a command whose files would not fit (its
--      output and exit status are kept, its files are not), uploads are
--      refused; checks and counting are serialized per user;
--   4. every upload ends in shell.commit_upload, which also limits uploads
--      per minute and refuses a session whose files are not in the database
--      yet; shell.enqueue checks the stored quotas for every way of queueing
--      a command (submit, replay);
--   5. collect_files keeps what a tree within the grace period refers to, and
--      an upload renews its blob under the blob's row lock, so collection
--      never removes a blob an upload is about to refer to.

-- 1. Entries below a tree -------------------------------------------------------

ALTER TABLE shell.trees
    ADD COLUMN entries bigint NOT NULL DEFAULT 0 CHECK (entries >= 0),   -- all entries below, each path once
    ADD COLUMN widest integer NOT NULL DEFAULT 0 CHECK (widest >= 0);    -- most entries of one directory below

-- Entries are stored after their tree's row and after their subtrees (put_tree
-- refuses a tree whose subtrees are missing), so the counts of the subtrees
-- are known when a tree's entries arrive. A statement trigger, so that any
-- way of storing trees keeps the counts.
CREATE FUNCTION shell.count_tree_entries() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    UPDATE shell.trees t SET entries = c.own + c.below, widest = greatest(c.own, c.widest_below)
    FROM (SELECT e.tree, count(*) AS own, coalesce(sum(k.entries), 0) AS below,
                 coalesce(max(k.widest), 0) AS widest_below
          FROM shell.tree_entries e
          LEFT JOIN shell.trees k ON e.kind = 'dir' AND k.hash = e.object
          WHERE e.tree IN (SELECT DISTINCT a.tree FROM added a)
          GROUP BY e.tree) c
    WHERE t.hash = c.tree;
    RETURN NULL;
END
$$;
CREATE TRIGGER tree_entries_counted AFTER INSERT ON shell.tree_entries
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION shell.count_tree_entries();

-- Trees stored before: children first, a round per level.
DO $$
BEGIN
    LOOP
        UPDATE shell.trees t SET entries = c.own + c.below, widest = greatest(c.own, c.widest_below)
        FROM (SELECT e.tree, count(*) AS own, coalesce(sum(k.entries), 0) AS below,
                     coalesce(max(k.widest), 0) AS widest_below
              FROM shell.tree_entries e
              LEFT JOIN shell.trees k ON e.kind = 'dir' AND k.hash = e.object
              GROUP BY e.tree) c
        WHERE t.hash = c.tree AND (t.entries, t.widest) IS DISTINCT FROM (c.own + c.below, greatest(c.own, c.widest_below));
        EXIT WHEN NOT FOUND;
    END LOOP;
END
$$;

-- 2. What a user holds ------------------------------------------------------------

-- One row per user: the bytes their kept history holds, and their upload
-- window. Its row lock serializes everything that changes or checks them.
CREATE TABLE shell.file_usage (
    user_id        uuid PRIMARY KEY REFERENCES shell.users (id),
    blob_bytes     bigint NOT NULL DEFAULT 0,   -- sizes of the distinct blobs held
    tree_bytes     bigint NOT NULL DEFAULT 0,   -- shell.entry_bytes of the entries of the distinct trees held
    upload_window  timestamptz,                 -- when the current minute of uploads began
    window_uploads integer NOT NULL DEFAULT 0
);
-- refs: how many of the user's roots and held trees' entries refer to it.
CREATE TABLE shell.held_trees (
    user_id uuid NOT NULL,
    tree    text NOT NULL,
    refs    bigint NOT NULL,
    bytes   bigint NOT NULL,   -- its own entries' shell.entry_bytes
    PRIMARY KEY (user_id, tree)
);
CREATE TABLE shell.held_blobs (
    user_id uuid NOT NULL,
    sha256  text NOT NULL,
    refs    bigint NOT NULL,
    size    bigint NOT NULL,
    PRIMARY KEY (user_id, sha256)
);
ALTER TABLE shell.file_usage ENABLE ROW LEVEL SECURITY;
ALTER TABLE shell.held_trees ENABLE ROW LEVEL SECURITY;
ALTER TABLE shell.held_blobs ENABLE ROW LEVEL SECURITY;

-- What one tree entry costs a user: about what its row and its two index
-- entries take (366 bytes measured with 15-byte names), growing with the name.
CREATE FUNCTION shell.entry_bytes(p_name text, p_target text) RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT 336 + 2 * octet_length(p_name) + coalesce(octet_length(p_target), 0)::bigint
$$;

-- The user's usage row, locked until the transaction ends (made on first use).
CREATE FUNCTION shell.lock_file_usage(p_user_id uuid) RETURNS shell.file_usage
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    found shell.file_usage;
BEGIN
    INSERT INTO shell.file_usage (user_id) VALUES (p_user_id) ON CONFLICT DO NOTHING;
    SELECT * INTO found FROM shell.file_usage f WHERE f.user_id = p_user_id FOR UPDATE;
    RETURN found;
END
$$;

-- The trees below p_root (itself included) that the user does not hold yet.
-- The walk stops at a held tree: what a held tree refers to is held too.
CREATE FUNCTION shell.unheld_trees(p_user_id uuid, p_root text) RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    WITH RECURSIVE fresh (hash) AS (
        SELECT p_root
        WHERE NOT EXISTS (SELECT FROM shell.held_trees h WHERE h.user_id = p_user_id AND h.tree = p_root)
        UNION
        SELECT e.object FROM fresh JOIN shell.tree_entries e ON e.tree = fresh.hash
        WHERE e.kind = 'dir'
          AND NOT EXISTS (SELECT FROM shell.held_trees h WHERE h.user_id = p_user_id AND h.tree = e.object)
    )
    SELECT coalesce(array_agg(fresh.hash), '{}') FROM fresh
$$;

-- How many bytes the user's count grows by when it comes to hold these
-- (unheld) trees: their entries, and the blobs they refer to that the user
-- does not hold yet.
CREATE FUNCTION shell.holding_cost(p_user_id uuid, p_fresh text[]) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT coalesce((SELECT sum(shell.entry_bytes(e.name, e.target)) FROM shell.tree_entries e
                     WHERE e.tree = ANY (p_fresh)), 0)
         + coalesce((SELECT sum(b.size) FROM (
                SELECT DISTINCT e.object, e.size FROM shell.tree_entries e
                WHERE e.tree = ANY (p_fresh) AND e.kind = 'file'
                  AND NOT EXISTS (SELECT FROM shell.held_blobs h
                                  WHERE h.user_id = p_user_id AND h.sha256 = e.object)) b), 0)
$$;

-- One more (p_n > 0) or fewer (p_n < 0) references of the user to a root.
CREATE FUNCTION shell.hold_root(p_user_id uuid, p_root text, p_n bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    fresh text[];
    added_trees bigint;
    added_blobs bigint;
BEGIN
    IF p_root IS NULL OR p_n = 0 THEN
        RETURN;
    END IF;
    PERFORM shell.lock_file_usage(p_user_id);
    IF p_n < 0 THEN
        PERFORM shell.release_root(p_user_id, p_root, -p_n);
        RETURN;
    END IF;
    UPDATE shell.held_trees h SET refs = h.refs + p_n WHERE h.user_id = p_user_id AND h.tree = p_root;
    IF FOUND THEN
        RETURN;
    END IF;
    fresh := shell.unheld_trees(p_user_id, p_root);
    added_blobs := shell.holding_cost(p_user_id, fresh);
    INSERT INTO shell.held_trees (user_id, tree, refs, bytes)
    SELECT p_user_id, f, 0, coalesce((SELECT sum(shell.entry_bytes(e.name, e.target))
                                      FROM shell.tree_entries e WHERE e.tree = f), 0)
    FROM unnest(fresh) f;
    SELECT coalesce(sum(h.bytes), 0) INTO added_trees FROM shell.held_trees h
    WHERE h.user_id = p_user_id AND h.tree = ANY (fresh);
    added_blobs := added_blobs - added_trees;
    -- Each subtree is new (just inserted) or held already: both conflict.
    INSERT INTO shell.held_trees AS h (user_id, tree, refs, bytes)
    SELECT p_user_id, e.object, count(*), 0 FROM shell.tree_entries e
    WHERE e.tree = ANY (fresh) AND e.kind = 'dir' GROUP BY e.object
    ON CONFLICT (user_id, tree) DO UPDATE SET refs = h.refs + excluded.refs;
    INSERT INTO shell.held_blobs AS h (user_id, sha256, refs, size)
    SELECT p_user_id, e.object, count(*), max(e.size) FROM shell.tree_entries e
    WHERE e.tree = ANY (fresh) AND e.kind = 'file' GROUP BY e.object
    ON CONFLICT (user_id, sha256) DO UPDATE SET refs = h.refs + excluded.refs;
    UPDATE shell.held_trees h SET refs = h.refs + p_n WHERE h.user_id = p_user_id AND h.tree = p_root;
    UPDATE shell.file_usage u SET blob_bytes = u.blob_bytes + added_blobs, tree_bytes = u.tree_bytes + added_trees
    WHERE u.user_id = p_user_id;
END
$$;

-- p_n fewer references to a root; what is then referred to by nothing of
-- the user's is no longer held, level by level (trees form no cycles).
CREATE FUNCTION shell.release_root(p_user_id uuid, p_root text, p_n bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    dead text[];
    left_refs bigint;
    gone_trees bigint := 0;
    gone_blobs bigint := 0;
BEGIN
    UPDATE shell.held_trees h SET refs = h.refs - p_n WHERE h.user_id = p_user_id AND h.tree = p_root
    RETURNING h.refs INTO left_refs;
    IF left_refs IS NULL OR left_refs > 0 THEN
        RETURN;
    END IF;
    dead := ARRAY[p_root];
    WHILE cardinality(dead) > 0 LOOP
        WITH gone AS (DELETE FROM shell.held_trees h WHERE h.user_id = p_user_id AND h.tree = ANY (dead)
                      RETURNING h.bytes)
        SELECT gone_trees + coalesce(sum(gone.bytes), 0) INTO gone_trees FROM gone;
        UPDATE shell.held_blobs h SET refs = h.refs - d.n
        FROM (SELECT e.object, count(*) AS n FROM shell.tree_entries e
              WHERE e.tree = ANY (dead) AND e.kind = 'file' GROUP BY e.object) d
        WHERE h.user_id = p_user_id AND h.sha256 = d.object;
        WITH gone AS (DELETE FROM shell.held_blobs h
                      WHERE h.user_id = p_user_id AND h.refs <= 0
                        AND h.sha256 IN (SELECT e.object FROM shell.tree_entries e
                                         WHERE e.tree = ANY (dead) AND e.kind = 'file')
                      RETURNING h.size)
        SELECT gone_blobs + coalesce(sum(gone.size), 0) INTO gone_blobs FROM gone;
        WITH lowered AS (
            UPDATE shell.held_trees h SET refs = h.refs - d.n
            FROM (SELECT e.object, count(*) AS n FROM shell.tree_entries e
                  WHERE e.tree = ANY (dead) AND e.kind = 'dir' GROUP BY e.object) d
            WHERE h.user_id = p_user_id AND h.tree = d.object
            RETURNING h.tree, h.refs)
        SELECT coalesce(array_agg(lowered.tree) FILTER (WHERE lowered.refs <= 0), '{}') INTO dead FROM lowered;
    END LOOP;
    UPDATE shell.file_usage u SET blob_bytes = u.blob_bytes - gone_blobs, tree_bytes = u.tree_bytes - gone_trees
    WHERE u.user_id = p_user_id;
END
$$;

-- The roots a row holds: a session its root; an ended command the roots it
-- started from and left (an unfinished one's root_before is its session's
-- root, held by the session meanwhile).
CREATE FUNCTION shell.hold_command_roots() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    ended constant text[] := ARRAY['done', 'failed', 'cancelled'];
    was text[] := '{}';
    now_held text[] := '{}';
    r text;
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status = ANY (ended) THEN
        was := array_remove(ARRAY[OLD.root_before, OLD.root_after], NULL);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.status = ANY (ended) THEN
        now_held := array_remove(ARRAY[NEW.root_before, NEW.root_after], NULL);
    END IF;
    IF was = now_held THEN
        RETURN NULL;
    END IF;
    -- New references first, so a subtree both keep is never let go of.
    FOREACH r IN ARRAY now_held LOOP
        PERFORM shell.hold_root(NEW.user_id, r, 1);
    END LOOP;
    FOREACH r IN ARRAY was LOOP
        PERFORM shell.hold_root(OLD.user_id, r, -1);
    END LOOP;
    RETURN NULL;
END
$$;
CREATE TRIGGER commands_hold_roots
    AFTER INSERT OR DELETE OR UPDATE OF status, root_before, root_after ON shell.commands
    FOR EACH ROW EXECUTE FUNCTION shell.hold_command_roots();

CREATE FUNCTION shell.hold_session_root() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.root IS NOT DISTINCT FROM NEW.root THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM shell.hold_root(NEW.user_id, NEW.root, 1);
    END IF;
    IF TG_OP <> 'INSERT' THEN
        PERFORM shell.hold_root(OLD.user_id, OLD.root, -1);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER sessions_hold_root AFTER INSERT OR DELETE OR UPDATE OF root ON shell.sessions
    FOR EACH ROW EXECUTE FUNCTION shell.hold_session_root();

-- The same bytes counted from scratch, by walking everything the user's
-- kept history refers to: for checking the count (tests, an administrator
-- in doubt), never on a tenant's path.
CREATE FUNCTION shell.file_bytes_walked(p_user_id uuid) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    WITH RECURSIVE roots (hash) AS (
        SELECT s.root FROM shell.sessions s WHERE s.user_id = p_user_id AND s.root IS NOT NULL
        UNION
        SELECT r.root FROM shell.commands c, LATERAL (VALUES (c.root_before), (c.root_after)) r(root)
        WHERE c.user_id = p_user_id AND c.status IN ('done', 'failed', 'cancelled') AND r.root IS NOT NULL
    ), reach (hash) AS (
        SELECT hash FROM roots
        UNION
        SELECT e.object FROM reach JOIN shell.tree_entries e ON e.tree = reach.hash WHERE e.kind = 'dir'
    )
    SELECT coalesce((SELECT sum(shell.entry_bytes(e.name, e.target))
                     FROM reach JOIN shell.tree_entries e ON e.tree = reach.hash), 0)
         + coalesce((SELECT sum(b.size) FROM (SELECT DISTINCT e.object, e.size
                     FROM reach JOIN shell.tree_entries e ON e.tree = reach.hash WHERE e.kind = 'file') b), 0)
$$;

-- What the history kept before this migration holds (the triggers, made
-- first, hold the table locks until this commits: nothing changes meanwhile).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT x.user_id, x.root, count(*) AS n FROM (
            SELECT s.user_id, s.root FROM shell.sessions s WHERE s.root IS NOT NULL
            UNION ALL
            SELECT c.user_id, c.root_before FROM shell.commands c
            WHERE c.status IN ('done', 'failed', 'cancelled') AND c.root_before IS NOT NULL
            UNION ALL
            SELECT c.user_id, c.root_after FROM shell.commands c
            WHERE c.status IN ('done', 'failed', 'cancelled') AND c.root_after IS NOT NULL) x
        GROUP BY x.user_id, x.root
    LOOP
        PERFORM shell.hold_root(r.user_id, r.root, r.n);
    END LOOP;
END
$$;

-- 3. The quota and the caps -------------------------------------------------------

ALTER TABLE shell.users
    ADD COLUMN max_tree_entries integer NOT NULL DEFAULT 10000 CHECK (max_tree_entries >= 0),
    ADD COLUMN max_root_entries integer NOT NULL DEFAULT 200000 CHECK (max_root_entries >= 0),
    ADD COLUMN max_uploads_per_minute integer NOT NULL DEFAULT 60 CHECK (max_uploads_per_minute >= 0);

-- Bytes a user's kept history holds: every distinct blob once, every entry
-- of every distinct tree (as in 0011 it was only their sessions' current
-- roots, so a file uploaded ten times counted once).
CREATE OR REPLACE FUNCTION shell.user_file_bytes(p_user_id uuid) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT coalesce((SELECT f.blob_bytes + f.tree_bytes FROM shell.file_usage f WHERE f.user_id = p_user_id), 0)
$$;

-- Why the user may not keep p_new_root where p_old_root was, or NULL when
-- they may. Locks the user's usage until the transaction ends, so the
-- answer holds until it commits. Only a changed root is checked: a command
-- that changed nothing always keeps its (unchanged) files.
CREATE FUNCTION shell.files_refusal(p_user_id uuid, p_old_root text, p_new_root text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    held shell.file_usage := shell.lock_file_usage(p_user_id);
    quota shell.users;
    root shell.trees;
    used bigint;
    cost bigint;
BEGIN
    IF p_new_root IS NULL OR p_new_root IS NOT DISTINCT FROM p_old_root THEN
        RETURN NULL;
    END IF;
    SELECT * INTO quota FROM shell.users u WHERE u.id = p_user_id;
    SELECT * INTO root FROM shell.trees t WHERE t.hash = p_new_root;
    IF root.widest > quota.max_tree_entries THEN
        RETURN format('a directory would hold %s entries, more than the limit of %s (max_tree_entries)',
                      root.widest, quota.max_tree_entries);
    END IF;
    IF root.entries > quota.max_root_entries THEN
        RETURN format('the home would hold %s entries, more than the limit of %s (max_root_entries)',
                      root.entries, quota.max_root_entries);
    END IF;
    cost := shell.holding_cost(p_user_id, shell.unheld_trees(p_user_id, p_new_root));
    used := held.blob_bytes + held.tree_bytes;
    IF cost > 0 AND used + cost > quota.max_file_bytes THEN
        RETURN format('files quota reached (%s of %s bytes)', used + cost, quota.max_file_bytes);
    END IF;
    RETURN NULL;
END
$$;

-- A file put into a session's tree, with the checks every tenant write has:
-- a valid path, within the tenant's files quota and caps (PT413 otherwise).
-- Returns the new root. Every upload comes here (shell.commit_upload, and a
-- replayed upload through shell.complete_upload).
CREATE OR REPLACE FUNCTION shell.put_file(p_session shell.sessions, p_root text, p_upload jsonb) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    new_root text;
    refusal text;
BEGIN
    new_root := shell.tree_put_path(coalesce(p_root, shell.empty_tree()),
        shell.path_parts(p_upload ->> 'path'),
        jsonb_build_object('kind', 'file', 'mode', (p_upload ->> 'mode')::integer,
                           'size', (p_upload ->> 'size')::bigint, 'object', p_upload ->> 'sha256'));
    refusal := shell.files_refusal(p_session.user_id, p_root, new_root);
    IF refusal IS NOT NULL THEN
        RAISE EXCEPTION '%', refusal USING ERRCODE = 'PT413',
            DETAIL = 'The files quota (max_file_bytes) counts every version of every file that the kept '
                     'history of your sessions holds, and each directory entry of it.',
            HINT = 'Deleting files does not free it; retention of old commands does, or an administrator '
                   'can raise it (pg-shell user quota --files-mb).';
    END IF;
    RETURN new_root;
END
$$;

-- Ends a claimed or running command with its result and saves the shell
-- state it left behind (already validated by the executor) as the
-- session's state. p_record is the executor's result record (signed unless
-- p_signature is NULL); it must agree with the stored output (22023
-- otherwise). The files the command left are the record's root_after,
-- whose trees the executor stored first: the session's root moves in this
-- transaction.
-- New here: a root the user may not keep (shell.files_refusal: the files
-- quota, entries per directory or per home) is not kept. The command then
-- fails with that reason, keeping its output and exit status; the session's
-- files, cwd and environment stay as they were before it, and no host's
-- copy holds them. The executor's record states an outcome that did not
-- happen, so the database chains its own record of what did.
CREATE OR REPLACE FUNCTION shell.complete_command(
    p_command_id bigint, p_worker_id text, p_attempt integer,
    p_record text, p_signature text DEFAULT NULL, p_key_id text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    lease record := shell.leased_command(p_command_id, p_worker_id, p_attempt, ARRAY['claimed', 'running']);
    cmd shell.commands := lease.leased;
    rec jsonb;
    new_status text;
    new_exit_code integer;
    new_truncated boolean;
    new_duration_ms integer;
    new_cwd text;
    new_env jsonb;
    new_root text;
    new_reason text;
    refusal text;
BEGIN
    BEGIN
        rec := p_record::jsonb;
        new_status := rec ->> 'status';
        new_exit_code := (rec ->> 'exit_code')::integer;
        new_truncated := coalesce((rec ->> 'truncated')::boolean, false);
        new_duration_ms := (rec ->> 'duration_ms')::integer;
        new_cwd := coalesce(rec ->> 'cwd_after', cmd.cwd_before);
        new_env := coalesce(rec -> 'env_after', cmd.env_before);
        new_root := coalesce(rec ->> 'root_after', cmd.root_before);
        new_reason := rec ->> 'reason';
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION 'result record is not a JSON object of the expected fields'
            USING ERRCODE = '22023', DETAIL = SQLERRM,
            HINT = 'exit_code and duration_ms are integers, truncated a boolean.';
    END;
    IF jsonb_typeof(rec) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'result record is not a JSON object' USING ERRCODE = '22023';
    END IF;
    IF new_status IS NULL OR new_status NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'invalid final status %', new_status USING ERRCODE = '22023';
    END IF;
    IF new_cwd NOT LIKE '/%' OR jsonb_typeof(new_env) <> 'object'
       OR EXISTS (SELECT FROM jsonb_each(new_env) e WHERE jsonb_typeof(e.value) <> 'string') THEN
        RAISE EXCEPTION 'invalid shell state' USING ERRCODE = '22023',
            DETAIL = 'cwd must be absolute and env an object of strings';
    END IF;
    IF new_root IS NOT NULL AND NOT EXISTS (SELECT FROM shell.trees t WHERE t.hash = new_root) THEN
        RAISE EXCEPTION 'root % is not stored', new_root USING ERRCODE = '22023',
            HINT = 'Store the trees and blobs of the new root before completing.';
    END IF;
    refusal := shell.files_refusal(cmd.user_id, cmd.root_before, new_root);
    IF refusal IS NOT NULL THEN
        new_status := 'failed';
        new_reason := refusal || ': the command''s changes to its files were not kept';
        new_cwd := cmd.cwd_before;
        new_env := cmd.env_before;
        new_root := cmd.root_before;
    END IF;
    UPDATE shell.commands c SET status = new_status, exit_code = new_exit_code,
        reason = new_reason, truncated = new_truncated, completed_at = now(),
        duration_ms = new_duration_ms, cwd_after = new_cwd, env_after = new_env,
        root_after = new_root, lease_expires_at = NULL, change_seq = lease.change
    WHERE c.id = p_command_id;
    IF p_signature IS NULL OR refusal IS NOT NULL THEN
        PERFORM shell.chain_result(p_command_id);
    ELSE
        PERFORM shell.chain_result(p_command_id, p_record, p_signature, p_key_id);
    END IF;
    UPDATE shell.sessions s SET cwd = new_cwd, env = new_env, root = new_root, last_active_at = now()
    WHERE s.id = cmd.session_id;
    UPDATE shell.lanes l SET active_command_id = NULL,
        cached_on = CASE WHEN refusal IS NULL THEN rec ->> 'host' END,
        ready_since = CASE WHEN l.pending > 0 THEN now() ELSE l.ready_since END
    WHERE l.session_id = cmd.session_id;
END
$$;

-- A tenant whose kept files reached the quota queues no more commands (as
-- for stored output, shell.check_output_quota): every new write would be
-- refused at completion.
CREATE FUNCTION shell.check_files_quota(p_user_id uuid) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    quota bigint := (SELECT u.max_file_bytes FROM shell.users u WHERE u.id = p_user_id);
    stored bigint := shell.user_file_bytes(p_user_id);
BEGIN
    IF stored >= quota THEN
        RAISE EXCEPTION 'stored files quota reached (% of % bytes)', stored, quota
            USING ERRCODE = 'PT429',
            DETAIL = 'The quota max_file_bytes counts every version of every file the kept history '
                     'of your sessions holds.',
            HINT = 'Ask an administrator to raise it (pg-shell user quota --files-mb), '
                   'or wait for retention to remove old commands.';
    END IF;
END
$$;

-- 4. Queueing and uploading -------------------------------------------------------

-- As in 0011, and every stored quota is checked here, so each way of
-- queueing commands (submit_command, replay_session, what comes next) is
-- refused alike: unfinished commands (max_queued), stored output
-- (max_output_bytes) and stored files (max_file_bytes), PT429. Sessions are
-- counted where they are made (shell.new_session, which forks and replays
-- go through) and running commands where they are claimed.
CREATE OR REPLACE FUNCTION shell.enqueue(
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
    PERFORM shell.check_output_quota(p_session.user_id);
    PERFORM shell.check_files_quota(p_session.user_id);
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

-- As in 0017; the quotas are checked by shell.enqueue.
CREATE OR REPLACE FUNCTION shell_api.submit_command(p_session_id uuid, p_command text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    -- \x0b is the vertical tab: E'\v' is not an escape in PostgreSQL (it is "v").
    IF p_command IS NULL OR btrim(p_command, E' \t\r\n\f\x0b') = '' THEN
        RAISE EXCEPTION 'command is empty' USING ERRCODE = '22023', HINT = 'Type a command to run.';
    END IF;
    IF octet_length(p_command) > 1048576 THEN
        RAISE EXCEPTION 'command is too large (% bytes)', octet_length(p_command)
            USING ERRCODE = 'PT413', DETAIL = 'A command may be at most 1048576 bytes.',
                  HINT = 'Put long scripts in a file in the session and run the file.';
    END IF;
    RETURN shell.enqueue(shell.owned_session(p_session_id), p_command);
END
$$;

-- The end every upload shares, whatever carried its bytes: a blob already
-- stored (its sha256 the hash of its chunks, checked by whoever stored
-- them) becomes the file at p_path of the caller's session, as an entry of
-- its history (ordered with its commands, chained in the audit log).
-- Refused: a busy session (PT409: a command running meanwhile would not see
-- the file, and its completion would be ordered before it); a session
-- whose files are not in the database yet (PT409: a session from before
-- the workspace keeps them on a host until its next command imports them,
-- and a root made of the upload alone would replace them all); more than
-- max_uploads_per_minute uploads in a minute (PT429); the files quota and
-- caps (PT413, shell.put_file). One user's uploads and completions are
-- counted one at a time (their usage row's lock), so parallel uploads
-- cannot pass the quota together.
CREATE FUNCTION shell.commit_upload(p_session_id uuid, p_path text, p_sha256 text, p_size bigint,
                                    p_mode integer)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    s shell.sessions := shell.owned_session(p_session_id);
    per_minute integer;
    uploads integer;
    window_start timestamptz;
    upload jsonb;
    new_root text;
    new_id bigint;
    seq bigint;
BEGIN
    PERFORM shell.path_parts(p_path);
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
    IF s.root IS NULL THEN
        RAISE EXCEPTION 'the session''s files are not in the database yet' USING ERRCODE = 'PT409',
            DETAIL = 'This session is from before files were kept in the database: they are on an '
                     'executor host until its next command imports them.',
            HINT = 'Run a command in it first (true will do), then upload again.';
    END IF;
    PERFORM shell.lock_file_usage(s.user_id);
    SELECT u.max_uploads_per_minute INTO per_minute FROM shell.users u WHERE u.id = s.user_id;
    UPDATE shell.file_usage f SET
        window_uploads = CASE WHEN f.upload_window > now() - interval '1 minute' THEN f.window_uploads + 1 ELSE 1 END,
        upload_window = CASE WHEN f.upload_window > now() - interval '1 minute' THEN f.upload_window ELSE now() END
    WHERE f.user_id = s.user_id
    RETURNING f.window_uploads, f.upload_window INTO uploads, window_start;
    IF uploads > per_minute THEN
        RAISE EXCEPTION 'upload rate limit reached (% uploads a minute)', per_minute USING ERRCODE = 'PT429',
            HINT = format('Upload again in %s seconds.',
                          greatest(1, ceil(extract(epoch FROM window_start + interval '1 minute' - now()))));
    END IF;
    -- Renewed under its row lock: shell.collect_files waits for this
    -- transaction and then finds the blob young, so it cannot remove it
    -- from under the tree about to refer to it.
    UPDATE shell.blobs b SET created_at = now() WHERE b.sha256 = p_sha256 AND b.size = p_size;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no stored content % of % bytes', p_sha256, p_size USING ERRCODE = '22023',
            HINT = 'Store the file''s content before committing its upload.';
    END IF;
    upload := jsonb_build_object('path', p_path, 'sha256', p_sha256, 'size', p_size, 'mode', p_mode);
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

-- Puts a file into the session's home at once: its bytes stored as a blob
-- (renewed if stored before), then shell.commit_upload.
CREATE OR REPLACE FUNCTION shell_api.upload_file(p_session_id uuid, p_path text, p_content bytea, p_mode integer DEFAULT 420)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    max_upload constant bigint := 67108864;
    chunk constant integer := 4194304;
    digest text;
    n integer;
BEGIN
    PERFORM shell.owned_session(p_session_id);
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
    digest := encode(sha256(p_content), 'hex');
    n := ceil(octet_length(p_content)::numeric / chunk)::integer;
    INSERT INTO shell.blobs (sha256, size, chunks) VALUES (digest, octet_length(p_content), n)
    ON CONFLICT (sha256) DO UPDATE SET created_at = now();
    INSERT INTO shell.blob_chunks (sha256, seq, data)
    SELECT digest, i, substring(p_content FROM i * chunk + 1 FOR chunk) FROM generate_series(0, n - 1) i
    ON CONFLICT DO NOTHING;
    RETURN shell.commit_upload(p_session_id, p_path, digest, octet_length(p_content), p_mode);
END
$$;

-- NULL leaves a quota as it is; p_max_output_mb and p_max_files_mb are in MiB.
DROP FUNCTION shell.set_user_quota(text, integer, integer, integer, integer);
CREATE FUNCTION shell.set_user_quota(
    p_username text,
    p_max_sessions integer DEFAULT NULL,
    p_max_running integer DEFAULT NULL,
    p_max_queued integer DEFAULT NULL,
    p_max_output_mb integer DEFAULT NULL,
    p_max_files_mb integer DEFAULT NULL,
    p_max_tree_entries integer DEFAULT NULL,
    p_max_root_entries integer DEFAULT NULL,
    p_max_uploads_per_minute integer DEFAULT NULL
) RETURNS TABLE (username text, max_sessions integer, max_running integer, max_queued integer,
                 max_output_mb bigint, max_files_mb bigint, max_tree_entries integer,
                 max_root_entries integer, max_uploads_per_minute integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    IF least(p_max_sessions, p_max_running, p_max_queued, p_max_output_mb, p_max_files_mb,
             p_max_tree_entries, p_max_root_entries, p_max_uploads_per_minute) < 0 THEN
        RAISE EXCEPTION 'quotas cannot be negative' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    UPDATE shell.users u SET
        max_sessions = coalesce(p_max_sessions, u.max_sessions),
        max_running = coalesce(p_max_running, u.max_running),
        max_queued = coalesce(p_max_queued, u.max_queued),
        max_output_bytes = coalesce(p_max_output_mb::bigint * 1048576, u.max_output_bytes),
        max_file_bytes = coalesce(p_max_files_mb::bigint * 1048576, u.max_file_bytes),
        max_tree_entries = coalesce(p_max_tree_entries, u.max_tree_entries),
        max_root_entries = coalesce(p_max_root_entries, u.max_root_entries),
        max_uploads_per_minute = coalesce(p_max_uploads_per_minute, u.max_uploads_per_minute)
    WHERE u.username = p_username
    RETURNING u.username, u.max_sessions, u.max_running, u.max_queued, u.max_output_bytes / 1048576,
              u.max_file_bytes / 1048576, u.max_tree_entries, u.max_root_entries, u.max_uploads_per_minute;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no user %', p_username USING ERRCODE = '22023';
    END IF;
END
$$;

-- 5. Collection ----------------------------------------------------------------------

-- As in 0011: trees and blobs that nothing retained reaches any more (no
-- session's root, no remaining command's roots, no pending upload) are
-- deleted, after a grace period that protects what an executor stored for
-- a command that has not completed yet; storing or finding an object again
-- renews it (put_tree, missing_blobs, uploads). New: a tree within the
-- grace period keeps what it refers to (it was kept, and its subtrees were
-- not, so a later put_tree found it and stored a root with holes). An
-- upload renews its blob under the blob's row lock (shell.commit_upload),
-- so the DELETE below waits for it and then sees the blob young.
CREATE OR REPLACE FUNCTION shell.collect_files(p_grace interval DEFAULT '1 hour', OUT trees bigint, OUT blobs bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    CREATE TEMPORARY TABLE reachable_trees ON COMMIT DROP AS
    WITH RECURSIVE reach (hash) AS (
        SELECT s.root FROM shell.sessions s WHERE s.root IS NOT NULL
        UNION
        SELECT r.root FROM shell.commands c, LATERAL (VALUES (c.root_before), (c.root_after)) r(root)
        WHERE r.root IS NOT NULL
        UNION
        SELECT t.hash FROM shell.trees t WHERE t.created_at >= now() - p_grace
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
