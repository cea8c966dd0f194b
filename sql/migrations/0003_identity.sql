-- Identity: who is calling, logging in, and the admin's user management.

-- Generated once, at the first migrate; the gateway and PostgREST verify
-- tokens with this same secret (`pg-shell db jwt-secret` prints it).
INSERT INTO shell.config (key, value) VALUES
    ('jwt_secret', encode(shell.gen_random_bytes(32), 'hex')),
    ('jwt_ttl_seconds', '43200');

-- The tenant is never a parameter: it is the JWT's subject, as PostgREST
-- passes it. Policies call this as (SELECT shell.current_user_id()) so it is
-- evaluated once per statement.
CREATE FUNCTION shell.current_user_id() RETURNS uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    claims jsonb;
    sub text;
BEGIN
    BEGIN
        claims := nullif(current_setting('request.jwt.claims', true), '')::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        claims := NULL;
    END;
    sub := claims ->> 'sub';
    IF sub IS NULL OR sub !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
       OR claims ->> 'role' IS DISTINCT FROM 'shell_user'
       OR NOT EXISTS (SELECT FROM shell.users WHERE id = sub::uuid) THEN
        RAISE EXCEPTION 'not signed in'
            USING ERRCODE = '42501',
                  HINT = 'Log in with shell_api.login and send the token as "Authorization: Bearer <token>".';
    END IF;
    RETURN sub::uuid;
END
$$;

CREATE FUNCTION shell.base64url(data bytea) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT translate(encode(data, 'base64'), E'+/=\n', '-_')
$$;

CREATE FUNCTION shell.sign_jwt(claims jsonb) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    signing_input text;
BEGIN
    signing_input := shell.base64url(convert_to('{"alg":"HS256","typ":"JWT"}', 'utf8'))
        || '.' || shell.base64url(convert_to(claims::text, 'utf8'));
    RETURN signing_input || '.' || shell.base64url(shell.hmac(
        convert_to(signing_input, 'utf8'),
        convert_to((SELECT value FROM shell.config WHERE key = 'jwt_secret'), 'utf8'),
        'sha256'));
END
$$;

CREATE FUNCTION shell_api.login(p_username text, p_password text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    found shell.users;
    ttl bigint := (SELECT value::bigint FROM shell.config WHERE key = 'jwt_ttl_seconds');
    -- Truncated, not rounded: an iat up to half a second in the future makes
    -- verifiers (PyJWT) reject the token as not yet valid.
    now_epoch bigint := floor(extract(epoch FROM now()))::bigint;
BEGIN
    SELECT * INTO found FROM shell.users WHERE username = lower(p_username);
    -- Hash even for an unknown name, so response time does not reveal which
    -- usernames exist.
    IF shell.crypt(coalesce(p_password, ''), coalesce(found.password_hash, shell.gen_salt('bf', 10)))
       IS DISTINCT FROM found.password_hash THEN
        RAISE EXCEPTION 'invalid username or password' USING ERRCODE = '28P01';
    END IF;
    RETURN json_build_object('token', shell.sign_jwt(jsonb_build_object(
        'sub', found.id, 'role', 'shell_user', 'iat', now_epoch, 'exp', now_epoch + ttl)));
END
$$;

CREATE FUNCTION shell.create_user(p_username text, p_password text) RETURNS uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    new_id uuid;
BEGIN
    IF p_username IS NULL OR p_username !~ '^[a-z_][a-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'invalid username %', coalesce(quote_literal(p_username), 'NULL')
            USING ERRCODE = '22023',
                  HINT = 'Use 1-63 characters: lowercase letters, digits, "_", "." or "-", starting with a letter or "_".';
    END IF;
    IF p_password IS NULL OR length(p_password) < 8 THEN
        RAISE EXCEPTION 'password too short' USING ERRCODE = '22023', HINT = 'Use at least 8 characters.';
    END IF;
    INSERT INTO shell.users (username, password_hash)
    VALUES (p_username, shell.crypt(p_password, shell.gen_salt('bf', 10)))
    RETURNING id INTO new_id;
    RETURN new_id;
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'user % already exists', p_username USING ERRCODE = '23505';
END
$$;

-- NULL leaves a quota as it is.
CREATE FUNCTION shell.set_user_quota(
    p_username text,
    p_max_sessions integer DEFAULT NULL,
    p_max_running integer DEFAULT NULL,
    p_max_queued integer DEFAULT NULL
) RETURNS TABLE (username text, max_sessions integer, max_running integer, max_queued integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    IF least(p_max_sessions, p_max_running, p_max_queued) < 0 THEN
        RAISE EXCEPTION 'quotas cannot be negative' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    UPDATE shell.users u SET
        max_sessions = coalesce(p_max_sessions, u.max_sessions),
        max_running = coalesce(p_max_running, u.max_running),
        max_queued = coalesce(p_max_queued, u.max_queued)
    WHERE u.username = p_username
    RETURNING u.username, u.max_sessions, u.max_running, u.max_queued;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no user %', p_username USING ERRCODE = '22023';
    END IF;
END
$$;

CREATE FUNCTION shell.jwt_secret() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT value FROM shell.config WHERE key = 'jwt_secret'
$$;

CREATE POLICY sessions_owner ON shell.sessions FOR SELECT TO shell_user
    USING (user_id = (SELECT shell.current_user_id()));
CREATE POLICY commands_owner ON shell.commands FOR SELECT TO shell_user
    USING (user_id = (SELECT shell.current_user_id()));
CREATE POLICY output_chunks_owner ON shell.output_chunks FOR SELECT TO shell_user
    USING (EXISTS (SELECT FROM shell.commands c
                   WHERE c.id = command_id AND c.user_id = (SELECT shell.current_user_id())));
CREATE POLICY users_admin ON shell.users FOR SELECT TO shell_admin USING (true);
