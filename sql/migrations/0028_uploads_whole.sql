-- An upload in parts is kept or dropped whole, finished once, and bounded
-- in the bytes a user may have staged.
--
-- 0023 removed staged parts one by one by their own age: a slow upload (open
-- longer than `upload_stale_after_s`) lost its oldest parts when its user
-- began another upload or cleanup ran, and upload_finish, which never checked
-- that the parts run unbroken from 0, stored what was left as the file. Two
-- upload_finish calls of one upload could both read its parts and store it
-- twice. And a user could stage `upload_open_max` whole uploads (512 MiB)
-- outside every quota.
--
-- Now an upload is abandoned when its newest part is older than
-- `upload_stale_after_s`, and then all its parts go; upload_finish locks the
-- parts and refuses a broken sequence; a user's staged parts total at most
-- `upload_staged_max_bytes` (two whole uploads).

INSERT INTO shell.config (key, value) VALUES ('upload_staged_max_bytes', '134217728')
ON CONFLICT (key) DO NOTHING;

-- Removes the uploads (of p_user_id, or of everyone when it is NULL) whose
-- newest part is older than `upload_stale_after_s`; returns the parts removed.
CREATE FUNCTION shell.drop_stale_uploads(p_user_id uuid) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    stale interval := make_interval(secs => (SELECT value::double precision FROM shell.config
                                             WHERE key = 'upload_stale_after_s'));
    removed bigint;
BEGIN
    DELETE FROM shell.upload_parts p
    WHERE (p.user_id, p.upload_id) IN (
        SELECT s.user_id, s.upload_id FROM shell.upload_parts s
        WHERE p_user_id IS NULL OR s.user_id = p_user_id
        GROUP BY s.user_id, s.upload_id
        HAVING max(s.created_at) < now() - stale);
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END
$$;

-- Stages one part of an upload (parts in order from 0, each at most 4 MiB);
-- returns the bytes staged for it so far. The first part of a new upload
-- removes the caller's abandoned uploads and counts the open ones.
CREATE OR REPLACE FUNCTION shell_api.upload_part(p_upload_id uuid, p_seq integer, p_data bytea)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    uid uuid := shell.current_user_id();
    max_upload constant bigint := 67108864;  -- as shell_api.upload_file
    open_max integer := (SELECT value::integer FROM shell.config WHERE key = 'upload_open_max');
    staged_max bigint := (SELECT value::bigint FROM shell.config WHERE key = 'upload_staged_max_bytes');
    expected integer;
    staged bigint;
    staged_by_user bigint;
BEGIN
    IF p_upload_id IS NULL OR p_seq IS NULL OR p_data IS NULL THEN
        RAISE EXCEPTION 'p_upload_id, p_seq and p_data are required' USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_data) > 4194304 THEN
        RAISE EXCEPTION 'a part is at most 4194304 bytes (this one has %)', octet_length(p_data)
            USING ERRCODE = 'PT413', HINT = 'Send the file in more, smaller parts.';
    END IF;
    -- One user's parts one at a time, so the counts below hold.
    PERFORM pg_advisory_xact_lock(hashtext('shell.upload_parts'), hashtext(uid::text));
    IF p_seq = 0 THEN
        PERFORM shell.drop_stale_uploads(uid);
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
    SELECT coalesce(sum(octet_length(p.data)), 0) INTO staged_by_user
    FROM shell.upload_parts p WHERE p.user_id = uid;
    IF staged_by_user + octet_length(p_data) > staged_max THEN
        RAISE EXCEPTION 'too many bytes staged in unfinished uploads (at most %)', staged_max
            USING ERRCODE = 'PT429',
                  HINT = 'Finish or discard (upload_discard) the uploads already started.';
    END IF;
    INSERT INTO shell.upload_parts (user_id, upload_id, seq, data) VALUES (uid, p_upload_id, p_seq, p_data);
    RETURN staged;
END
$$;

-- Puts the staged upload's bytes at p_path, through shell_api.upload_file
-- (every check of an upload applies); returns the upload's history entry.
-- The parts are locked, so a second finish of the same upload waits and then
-- finds none; they are consumed only if the file is put: after a refusal (a
-- busy session, PT409) the same upload can be finished again.
CREATE OR REPLACE FUNCTION shell_api.upload_finish(p_upload_id uuid, p_session_id uuid, p_path text,
                                                   p_mode integer DEFAULT 420)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    uid uuid := shell.current_user_id();
    content bytea;
    parts integer;
    last_seq integer;
BEGIN
    PERFORM FROM shell.upload_parts p WHERE p.user_id = uid AND p.upload_id = p_upload_id FOR UPDATE;
    SELECT string_agg(p.data, ''::bytea ORDER BY p.seq), count(*), max(p.seq)
    INTO content, parts, last_seq
    FROM shell.upload_parts p WHERE p.user_id = uid AND p.upload_id = p_upload_id;
    IF parts = 0 THEN
        RAISE EXCEPTION 'no upload %', p_upload_id USING ERRCODE = '22023',
            HINT = 'Stage its parts with upload_part first (an empty file is one empty part).';
    END IF;
    IF last_seq <> parts - 1 THEN
        RAISE EXCEPTION 'upload % is missing parts (% of %)', p_upload_id, parts, last_seq + 1
            USING ERRCODE = '22023', HINT = 'Discard it (upload_discard) and upload the file again.';
    END IF;
    DELETE FROM shell.upload_parts p WHERE p.user_id = uid AND p.upload_id = p_upload_id;
    RETURN shell_api.upload_file(p_session_id, p_path, content, p_mode);
END
$$;

-- Retention: uploads abandoned by every user, whole.
CREATE OR REPLACE FUNCTION shell.collect_upload_parts() RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    SELECT shell.drop_stale_uploads(NULL)
$$;
