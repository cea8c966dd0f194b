-- Limits under abuse that live in the database, so they hold behind
-- PostgREST as behind `pg-shell serve` (DESIGN §11).

-- Every SQL path a tenant or an anonymous client reaches has a statement
-- timeout. PostgREST (12+) applies an impersonated role's settings in each
-- transaction, and so does the gateway (executor/db/gateway.py).
ALTER ROLE shell_anon SET statement_timeout = '10s';
ALTER ROLE shell_user SET statement_timeout = '10s';

-- Login throttling per username. After `login_free_failures` failures in a
-- row, each further failure closes the name for an exponentially longer
-- time (`login_backoff_base_s` doubled per failure, at most
-- `login_backoff_max_s`). While closed, login answers 429 without checking
-- the password: a guesser gets one try per window, and bcrypt is not spent.
-- The cap bounds how long a guesser can keep the real user out: once the
-- window ends, her right password gets in and clears the count. Unknown
-- names are counted alike, so throttling does not reveal which names exist.
CREATE TABLE shell.login_failures (
    username     text PRIMARY KEY,
    failures     integer NOT NULL,
    last_failure timestamptz NOT NULL,
    closed_until timestamptz NOT NULL
);
CREATE INDEX login_failures_last_failure ON shell.login_failures (last_failure);
ALTER TABLE shell.login_failures ENABLE ROW LEVEL SECURITY;

INSERT INTO shell.config (key, value) VALUES
    ('login_free_failures', '5'),
    ('login_backoff_base_s', '1'),
    ('login_backoff_max_s', '300')
ON CONFLICT (key) DO NOTHING;

-- PostgREST's way for a function to answer with a status of its choice and
-- still commit: the response.status / response.headers settings. Raising
-- instead would roll the recorded failure back.
CREATE FUNCTION shell.respond(p_status integer, p_code text, p_message text,
                              p_retry_after integer DEFAULT NULL) RETURNS json
LANGUAGE sql VOLATILE SET search_path = '' AS $$
    SELECT set_config('response.status', p_status::text, true),
           set_config('response.headers',
                      CASE WHEN p_retry_after IS NULL THEN '[]'
                           ELSE json_build_array(json_build_object(
                                    'Retry-After', p_retry_after::text))::text END,
                      true);
    SELECT json_build_object('code', p_code, 'message', p_message, 'details', NULL, 'hint',
                             CASE WHEN p_retry_after IS NULL THEN NULL
                                  ELSE format('Try again in %s seconds.', p_retry_after) END);
$$;

-- The failure count of a name after one more failure, and how long it is closed.
CREATE FUNCTION shell.record_login_failure(p_name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    free integer := (SELECT value::integer FROM shell.config WHERE key = 'login_free_failures');
    base double precision := (SELECT value::double precision FROM shell.config
                              WHERE key = 'login_backoff_base_s');
    cap double precision := (SELECT value::double precision FROM shell.config
                             WHERE key = 'login_backoff_max_s');
    n integer;
BEGIN
    -- Names idle for a day are forgotten, so guessed names cannot fill the table.
    DELETE FROM shell.login_failures WHERE last_failure < now() - interval '1 day';
    INSERT INTO shell.login_failures AS f (username, failures, last_failure, closed_until)
    VALUES (p_name, 1, now(), now())
    ON CONFLICT (username) DO UPDATE
        SET failures = f.failures + 1, last_failure = now(),
            closed_until = greatest(f.closed_until, now())
    RETURNING failures INTO n;
    IF n > free THEN
        UPDATE shell.login_failures
        SET closed_until = now() + make_interval(secs => least(cap, base * 2 ^ least(n - free - 1, 30)))
        WHERE username = p_name;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION shell_api.login(p_username text, p_password text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    -- Valid names are at most 63 characters: a longer one names nobody.
    name text := left(lower(coalesce(p_username, '')), 64);
    found shell.users;
    closed timestamptz := (SELECT closed_until FROM shell.login_failures WHERE username = name);
    ttl bigint := (SELECT value::bigint FROM shell.config WHERE key = 'jwt_ttl_seconds');
    -- Truncated, not rounded: an iat up to half a second in the future makes
    -- verifiers (PyJWT) reject the token as not yet valid.
    now_epoch bigint := floor(extract(epoch FROM now()))::bigint;
BEGIN
    IF closed > now() THEN
        RETURN shell.respond(429, 'PT429', 'too many failed logins for this username',
                             ceil(extract(epoch FROM closed - now()))::integer);
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
