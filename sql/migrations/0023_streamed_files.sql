-- Files in pieces, so that nothing between a client and the database holds a
-- whole file (DESIGN §11):
--
--   upload   upload_part stages a file's bytes a part at a time under an id
--            the client chose; upload_finish assembles them and puts the file
--            through shell_api.upload_file itself, so an upload made in parts
--            passes every check a whole one does (path, mode, size, the
--            session idle, the user's quotas) and is the same history entry.
--            `pg-shell serve` stages the p_content of an upload_file body this
--            way while the body is still arriving; a PostgREST client calls
--            the three functions itself.
--   download read_file_part reads a slice of a file; the gateway streams
--            read_file as such slices and checks the bytes against the
--            blob's SHA-256 before it sends the last of them.
--
-- read_file (the whole file in one answer) now checks the blob against its
-- hash too: bytes altered in the database are refused (XX001), not served.
--
-- Staged parts are the caller's alone (keyed by user and upload id), at most
-- `upload_open_max` uploads at a time and at most an upload's size each;
-- parts older than `upload_stale_after_s` belong to an abandoned upload and
-- are removed when the user stages another, or by shell.collect_upload_parts.

INSERT INTO shell.config (key, value) VALUES
    ('upload_open_max', '8'),
    ('upload_stale_after_s', '3600'),
    ('request_slots_per_user', '4')
ON CONFLICT (key) DO NOTHING;

CREATE TABLE shell.upload_parts (
    user_id    uuid NOT NULL REFERENCES shell.users (id) ON DELETE CASCADE,
    upload_id  uuid NOT NULL,
    seq        integer NOT NULL CHECK (seq >= 0),
    data       bytea NOT NULL CHECK (octet_length(data) <= 4194304),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, upload_id, seq)
);
CREATE INDEX upload_parts_created_at ON shell.upload_parts (created_at);
ALTER TABLE shell.upload_parts ENABLE ROW LEVEL SECURITY;

-- Stages one part of an upload (parts in order from 0, each at most 4 MiB);
-- returns the bytes staged for it so far. The first part of a new upload
-- removes the caller's abandoned ones and counts the open ones.
CREATE FUNCTION shell_api.upload_part(p_upload_id uuid, p_seq integer, p_data bytea)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    uid uuid := shell.current_user_id();
    max_upload constant bigint := 67108864;  -- as shell_api.upload_file
    open_max integer := (SELECT value::integer FROM shell.config WHERE key = 'upload_open_max');
    stale interval := make_interval(secs => (SELECT value::double precision FROM shell.config
                                             WHERE key = 'upload_stale_after_s'));
    expected integer;
    staged bigint;
BEGIN
    IF p_upload_id IS NULL OR p_seq IS NULL OR p_data IS NULL THEN
        RAISE EXCEPTION 'p_upload_id, p_seq and p_data are required' USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_data) > 4194304 THEN
        RAISE EXCEPTION 'a part is at most 4194304 bytes (this one has %)', octet_length(p_data)
            USING ERRCODE = 'PT413', HINT = 'Send the file in more, smaller parts.';
    END IF;
    IF p_seq = 0 THEN
        -- One user's new uploads one at a time, so the count below holds.
        PERFORM pg_advisory_xact_lock(hashtext('shell.upload_parts'), hashtext(uid::text));
        DELETE FROM shell.upload_parts p WHERE p.user_id = uid AND p.created_at < now() - stale;
        IF (SELECT count(DISTINCT p.upload_id) FROM shell.upload_parts p
            WHERE p.user_id = uid AND p.upload_id <> p_upload_id) >= open_max THEN
            RAISE EXCEPTION 'too many uploads in progress (at most %)', open_max
                USING ERRCODE = 'PT429',
                      HINT = 'Finish or discard (upload_discard) the uploads already started.';
        END IF;
    END IF;
    SELECT coalesce(max(p.seq) + 1, 0), coalesce(sum(octet_length(p.data)), 0)
    INTO expected, staged
    FROM shell.upload_parts p WHERE p.user_id = uid AND p.upload_id = p_upload_id;
    IF p_seq <> expected THEN
        RAISE EXCEPTION 'part % of upload % comes out of order: part % is next', p_seq, p_upload_id, expected
            USING ERRCODE = '22023', HINT = 'Send the parts in order, starting from 0.';
    END IF;
    staged := staged + octet_length(p_data);
    IF staged > max_upload THEN
        RAISE EXCEPTION 'file is too large (more than % bytes)', max_upload USING ERRCODE = 'PT413',
            DETAIL = format('An upload may be at most %s bytes.', max_upload);
    END IF;
    INSERT INTO shell.upload_parts (user_id, upload_id, seq, data) VALUES (uid, p_upload_id, p_seq, p_data);
    RETURN staged;
END
$$;

-- Puts the staged upload's bytes at p_path, through shell_api.upload_file
-- (every check of an upload applies); returns the upload's history entry.
-- The parts are consumed only if the file is put: after a refusal (a busy
-- session, PT409) the same upload can be finished again.
CREATE FUNCTION shell_api.upload_finish(p_upload_id uuid, p_session_id uuid, p_path text,
                                        p_mode integer DEFAULT 420)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    uid uuid := shell.current_user_id();
    content bytea;
    parts integer;
BEGIN
    SELECT string_agg(p.data, ''::bytea ORDER BY p.seq), count(*) INTO content, parts
    FROM shell.upload_parts p WHERE p.user_id = uid AND p.upload_id = p_upload_id;
    IF parts = 0 THEN
        RAISE EXCEPTION 'no upload %', p_upload_id USING ERRCODE = '22023',
            HINT = 'Stage its parts with upload_part first (an empty file is one empty part).';
    END IF;
    DELETE FROM shell.upload_parts p WHERE p.user_id = uid AND p.upload_id = p_upload_id;
    RETURN shell_api.upload_file(p_session_id, p_path, content, p_mode);
END
$$;

-- Drops a staged upload (nothing happens if there is none).
CREATE FUNCTION shell_api.upload_discard(p_upload_id uuid) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    DELETE FROM shell.upload_parts p WHERE p.user_id = shell.current_user_id() AND p.upload_id = p_upload_id
$$;

-- Retention: parts of abandoned uploads, of every user.
CREATE FUNCTION shell.collect_upload_parts() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    removed bigint;
BEGIN
    DELETE FROM shell.upload_parts p
    WHERE p.created_at < now() - make_interval(secs => (SELECT value::double precision FROM shell.config
                                                         WHERE key = 'upload_stale_after_s'));
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END
$$;

-- The file at p_path (now, or right after p_command_id) as an entry, or the
-- error read_file gives for a path that is not a file.
CREATE FUNCTION shell.file_entry(p_session_id uuid, p_path text, p_command_id bigint)
RETURNS shell.tree_entries
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
    RETURN entry;
END
$$;

-- A blob whose bytes are not the ones its hash names was altered where it
-- is stored: nothing may serve them.
CREATE FUNCTION shell.blob_corrupted(p_sha256 text) RETURNS void
LANGUAGE plpgsql SET search_path = '' AS $$
BEGIN
    RAISE EXCEPTION 'a stored file does not match its hash (%)', p_sha256 USING ERRCODE = 'XX001',
        HINT = 'Its bytes were altered in the database: restore them from a backup.';
END
$$;

-- PostgREST serves a function's result raw when its type is a domain named
-- after the media type the client accepts (application/octet-stream). The
-- bytes are checked against the blob's SHA-256 before they are returned.
CREATE OR REPLACE FUNCTION shell_api.read_file(p_session_id uuid, p_path text, p_command_id bigint DEFAULT NULL)
RETURNS shell_api."application/octet-stream"
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    entry shell.tree_entries := shell.file_entry(p_session_id, p_path, p_command_id);
    content bytea := shell.blob_content(entry.object);
BEGIN
    IF encode(sha256(content), 'hex') <> entry.object OR octet_length(content) <> entry.size THEN
        PERFORM shell.blob_corrupted(entry.object);
    END IF;
    RETURN content;
END
$$;

-- A slice of a file: p_length bytes (at most 4 MiB) from byte p_offset, with
-- the file's sha256 and size, so a reader can check what it assembled. Given
-- p_sha256 (the file's hash from a first slice), a file that has changed
-- since is refused (PT409) rather than mixed into the same download.
CREATE FUNCTION shell_api.read_file_part(p_session_id uuid, p_path text, p_command_id bigint DEFAULT NULL,
                                         p_offset bigint DEFAULT 0, p_length integer DEFAULT 1048576,
                                         p_sha256 text DEFAULT NULL)
RETURNS TABLE (sha256 text, size bigint, data bytea)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    entry shell.tree_entries := shell.file_entry(p_session_id, p_path, p_command_id);
BEGIN
    IF p_offset IS NULL OR p_offset < 0 OR p_length IS NULL OR p_length NOT BETWEEN 0 AND 4194304 THEN
        RAISE EXCEPTION 'p_offset must be at least 0 and p_length between 0 and 4194304' USING ERRCODE = '22023';
    END IF;
    IF p_sha256 IS NOT NULL AND p_sha256 <> entry.object THEN
        RAISE EXCEPTION '% changed while it was read', p_path USING ERRCODE = 'PT409',
            HINT = 'Read it again from the start, or read it as of a command (p_command_id).';
    END IF;
    RETURN QUERY
    WITH c AS (
        SELECT k.seq, k.data, octet_length(k.data)::bigint AS len,
               sum(octet_length(k.data)::bigint) OVER (ORDER BY k.seq) - octet_length(k.data) AS start
        FROM shell.blob_chunks k WHERE k.sha256 = entry.object
    )
    SELECT entry.object, entry.size,
           coalesce(string_agg(substring(c.data FROM (greatest(p_offset - c.start, 0) + 1)::integer
                                         FOR (least(c.start + c.len, p_offset + p_length)
                                              - greatest(c.start, p_offset))::integer),
                               ''::bytea ORDER BY c.seq), ''::bytea)
    FROM c WHERE c.start < p_offset + p_length AND c.start + c.len > p_offset;
END
$$;

-- PostgREST's equivalent of the gateway's per-user cap on database slots
-- (`db-pre-request = "shell.request_slot"` in postgrest.conf): each request
-- of a signed-in user takes one of `request_slots_per_user` slots for its
-- transaction (transaction-level advisory locks, released at its end), and
-- one beyond them is answered 429 at once instead of waiting for a
-- connection others need. Anonymous requests pass.
CREATE FUNCTION shell.request_slot() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    claims jsonb;
    slots integer := (SELECT value::integer FROM shell.config WHERE key = 'request_slots_per_user');
    slot_key integer;
BEGIN
    BEGIN
        claims := nullif(current_setting('request.jwt.claims', true), '')::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        RETURN;
    END;
    IF claims ->> 'sub' IS NULL THEN
        RETURN;
    END IF;
    slot_key := hashtext('shell.request_slot:' || (claims ->> 'sub'));
    FOR i IN 0 .. slots - 1 LOOP
        IF pg_try_advisory_xact_lock(slot_key, i) THEN
            RETURN;
        END IF;
    END LOOP;
    -- PostgREST's raise with a status and headers of the function's choice.
    RAISE SQLSTATE 'PGRST' USING
        MESSAGE = json_build_object('code', 'PT429', 'message',
                                    format('too many requests of this user at once (at most %s)', slots),
                                    'details', NULL, 'hint', 'Try again in 1 seconds.')::text,
        DETAIL = '{"status": 429, "headers": {"Retry-After": "1"}}';
END
$$;
