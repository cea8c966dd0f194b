-- Login attempts on one name are taken one at a time, and a tenant's path
-- has a bounded depth (issue 21: the login back-off race, 2,048-part upload
-- paths).

-- Login throttling per username (0016). After `login_free_failures`
-- failures in a row, each further failure closes the name for an
-- exponentially longer time (`login_backoff_base_s` doubled per failure, at
-- most `login_backoff_max_s`). While closed, login answers 429 without
-- checking the password: a guesser gets one try per window, and bcrypt is
-- not spent. The cap bounds how long a guesser can keep the real user out:
-- once the window ends, her right password gets in and clears the count.
-- Unknown names are counted alike, so throttling does not reveal which names
-- exist.
--
-- Attempts on one name are serialized: login takes a transaction-level
-- advisory lock on the name before it reads whether the name is closed, and
-- holds it through the password check and the recorded failure until it
-- commits. Without it, parallel attempts all read "open" before any of them
-- recorded its failure, and ten wrong passwords sent at once were all
-- checked inside one window. With it, the free failures and the one that
-- closes the name are checked, and every later attempt waits for the one
-- before it and then reads the name closed. The times are read with
-- clock_timestamp() once the lock is held: now() is when the transaction
-- began, before its wait. Other names are not held up (one lock per name).

-- The failure count of a name after one more failure, and how long it is
-- closed; the caller holds the name's lock (shell.lock_login).
CREATE OR REPLACE FUNCTION shell.record_login_failure(p_name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    free integer := (SELECT value::integer FROM shell.config WHERE key = 'login_free_failures');
    base double precision := (SELECT value::double precision FROM shell.config
                              WHERE key = 'login_backoff_base_s');
    cap double precision := (SELECT value::double precision FROM shell.config
                             WHERE key = 'login_backoff_max_s');
    at timestamptz := clock_timestamp();
    n integer;
BEGIN
    -- Names idle for a day are forgotten, so guessed names cannot fill the table.
    DELETE FROM shell.login_failures WHERE last_failure < at - interval '1 day';
    INSERT INTO shell.login_failures AS f (username, failures, last_failure, closed_until)
    VALUES (p_name, 1, at, at)
    ON CONFLICT (username) DO UPDATE
        SET failures = f.failures + 1, last_failure = at,
            closed_until = greatest(f.closed_until, at)
    RETURNING failures INTO n;
    IF n > free THEN
        UPDATE shell.login_failures
        SET closed_until = at + make_interval(secs => least(cap, base * 2 ^ least(n - free - 1, 30)))
        WHERE username = p_name;
    END IF;
END
$$;

-- Waits for the other attempts on a name to end (commit or roll back), and
-- returns the time after the wait.
CREATE FUNCTION shell.lock_login(p_name text) RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SET search_path = '' AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('shell.login:' || p_name, 0));
    RETURN clock_timestamp();
END
$$;

CREATE OR REPLACE FUNCTION shell_api.login(p_username text, p_password text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    -- Valid names are at most 63 characters: a longer one names nobody.
    name text := left(lower(coalesce(p_username, '')), 64);
    -- Before anything about the name is read: see the comment above.
    at timestamptz := shell.lock_login(name);
    found shell.users;
    closed timestamptz := (SELECT closed_until FROM shell.login_failures WHERE username = name);
    ttl bigint := (SELECT value::bigint FROM shell.config WHERE key = 'jwt_ttl_seconds');
    -- Truncated, not rounded: an iat up to half a second in the future makes
    -- verifiers (PyJWT) reject the token as not yet valid.
    now_epoch bigint := floor(extract(epoch FROM now()))::bigint;
BEGIN
    IF closed > at THEN
        RETURN shell.respond(429, 'PT429', 'too many failed logins for this username',
                             ceil(extract(epoch FROM closed - at))::integer);
    END IF;
    SELECT * INTO found FROM shell.users WHERE username = name;
    -- Hash even for an unknown name, so response time does not reveal which
    -- usernames exist.
    IF shell.crypt(coalesce(p_password, ''), coalesce(found.password_hash, shell.gen_salt('bf', 10)))
       IS DISTINCT FROM found.password_hash THEN
        PERFORM shell.record_login_failure(name);
        RETURN shell.respond(403, '28P01', 'invalid username or password');
    END IF;
    DELETE FROM shell.login_failures WHERE username = name;
    RETURN json_build_object('token', shell.sign_jwt(jsonb_build_object(
        'sub', found.id, 'role', 'shell_user', 'iat', now_epoch, 'exp', now_epoch + ttl)));
END
$$;

-- A tenant's path: relative to the home, '/'-separated, no '.', '..' or
-- empty part. Returns its parts, or raises 22023.
--
-- At most 4096 bytes (PATH_MAX) and 256 parts, each at most 255 bytes
-- (NAME_MAX). The depth bound is there because putting a file walks its
-- directories recursively (shell.tree_put_path, a call per part): with
-- PostgreSQL's default max_stack_depth (2 MB) about 500 levels exhaust the
-- stack, and a 2,048-part path (a/a/…, 4095 bytes) failed with 54001, a 500.
-- The bound applies to every path a tenant names (upload_file, read_file),
-- so a file deeper than it, made by a command, is listed but not read by
-- path.
CREATE OR REPLACE FUNCTION shell.path_parts(p_path text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE SET search_path = '' AS $$
DECLARE
    max_bytes constant integer := 4096;
    max_parts constant integer := 256;
    parts text[];
BEGIN
    IF p_path IS NULL OR p_path = '' OR left(p_path, 1) = '/' THEN
        RAISE EXCEPTION 'invalid path %', coalesce(quote_literal(left(p_path, 200)), 'NULL') USING ERRCODE = '22023',
            HINT = 'Give a path relative to the session''s home, such as src/main.py.';
    END IF;
    IF octet_length(p_path) > max_bytes THEN
        RAISE EXCEPTION 'path is too long (% bytes)', octet_length(p_path) USING ERRCODE = '22023',
            DETAIL = format('A path may be at most %s bytes long.', max_bytes),
            HINT = 'Give a shorter path.';
    END IF;
    parts := string_to_array(p_path, '/');
    IF array_length(parts, 1) > max_parts THEN
        RAISE EXCEPTION 'path is too deep (% parts)', array_length(parts, 1) USING ERRCODE = '22023',
            DETAIL = format('A path may have at most %s parts (directories and the file''s name).', max_parts),
            HINT = 'Give a path with fewer directories.';
    END IF;
    IF EXISTS (SELECT FROM unnest(parts) part WHERE part IN ('', '.', '..') OR octet_length(part) > 255) THEN
        RAISE EXCEPTION 'invalid path %', quote_literal(left(p_path, 200)) USING ERRCODE = '22023',
            DETAIL = 'A path may not contain empty, "." or ".." parts, nor parts over 255 bytes.',
            HINT = 'Give a path relative to the session''s home, such as src/main.py.';
    END IF;
    RETURN parts;
END
$$;
