-- Image lifecycle: the sandbox images an administrator promoted
-- (`pg-shell image promote`), and which one is current. Running executors
-- read the current digest every maintenance round and start new commands on
-- it; commands already running finish on the image they started on.

CREATE TABLE shell.images (
    digest      text PRIMARY KEY CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    -- the last time it was promoted (re-promoting an older image moves it)
    promoted_at timestamptz NOT NULL DEFAULT now(),
    promoted_by text NOT NULL DEFAULT session_user,
    is_current  boolean NOT NULL DEFAULT false
);
-- The invariant, kept by the database: at most one current image.
CREATE UNIQUE INDEX images_one_current ON shell.images (is_current) WHERE is_current;
ALTER TABLE shell.images ENABLE ROW LEVEL SECURITY;

-- Makes p_digest (an engine's immutable image id, checked there by the
-- caller) the current image; returns it and the image it replaced.
CREATE FUNCTION shell.promote_image(p_digest text)
RETURNS TABLE (digest text, promoted_at timestamptz, previous text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    old text;
BEGIN
    IF p_digest IS NULL OR p_digest !~ '^sha256:[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'not an image digest: %', coalesce(left(p_digest, 100), 'NULL')
            USING ERRCODE = '22023', HINT = 'Give the image id, sha256: and 64 hex digits.';
    END IF;
    -- Serializes concurrent promotions (the unique index would fail one).
    LOCK TABLE shell.images IN SHARE ROW EXCLUSIVE MODE;
    SELECT i.digest INTO old FROM shell.images i WHERE i.is_current;
    UPDATE shell.images i SET is_current = false WHERE i.is_current AND i.digest <> p_digest;
    INSERT INTO shell.images AS i (digest, is_current) VALUES (p_digest, true)
    ON CONFLICT ON CONSTRAINT images_pkey DO UPDATE
        SET is_current = true, promoted_at = now(), promoted_by = session_user;
    RETURN QUERY SELECT i.digest, i.promoted_at, old FROM shell.images i WHERE i.digest = p_digest;
END
$$;

-- The current image, if one was promoted (no row: executors use
-- PG_SHELL_IMAGE). One row read on a unique index: cheap enough to poll.
CREATE FUNCTION shell.current_image()
RETURNS TABLE (digest text, promoted_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT i.digest, i.promoted_at FROM shell.images i WHERE i.is_current
$$;

-- Every image that was promoted or that a retained command ran on (or will
-- run on: a pending replay carries its original's digest), with how many
-- commands. A scan of the history: for administrators, not for hot paths.
CREATE FUNCTION shell.image_usage()
RETURNS TABLE (digest text, commands bigint, last_used_at timestamptz,
               promoted_at timestamptz, is_current boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    WITH used AS (
        SELECT c.image_digest AS digest, count(*) AS commands,
               max(coalesce(c.started_at, c.submitted_at)) AS last_used_at
        FROM shell.commands c
        WHERE c.image_digest IS NOT NULL
        GROUP BY c.image_digest
    )
    SELECT coalesce(u.digest, i.digest), coalesce(u.commands, 0), u.last_used_at,
           i.promoted_at, coalesce(i.is_current, false)
    FROM used u
    FULL JOIN shell.images i ON i.digest = u.digest
    ORDER BY i.promoted_at DESC NULLS LAST, u.last_used_at DESC NULLS LAST
$$;
