-- Secrets: values a user's commands use and the database never holds in
-- the clear. set_secret encrypts a value to the public key executors
-- registered (OpenPGP, pgcrypto); only executors hold the private key
-- (PG_SHELL_SECRETS_KEY_FILE). A session names the secrets its commands get
-- (create_session's p_secrets, set_session_secrets); a claim hands each
-- named secret's ciphertext to the executor, which decrypts it into the
-- command's environment, keeps it out of the state it reports back
-- (env_after) and masks its value in the output before storing it. The
-- command's row and its result record (version 7) name each secret and its
-- version, never its value.

CREATE TABLE shell.secrets_keys (
    fingerprint text PRIMARY KEY CONSTRAINT secrets_keys_fingerprint_check CHECK (fingerprint ~ '^[0-9A-F]{40}$'),
    public_key text NOT NULL,
    registered_at timestamp with time zone DEFAULT now() NOT NULL
);
COMMENT ON TABLE shell.secrets_keys IS
    'Public keys executors registered to have secrets encrypted to; set_secret uses the newest. The private keys are the executors''.';

CREATE TABLE shell.secrets (
    user_id uuid NOT NULL REFERENCES shell.users (id) ON DELETE CASCADE,
    name text NOT NULL,
    version integer DEFAULT 1 NOT NULL,
    ciphertext bytea,
    key_fingerprint text REFERENCES shell.secrets_keys (fingerprint),
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    PRIMARY KEY (user_id, name),
    CONSTRAINT secrets_name_check CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_]{0,63}$'),
    CONSTRAINT secrets_deleted_check CHECK ((ciphertext IS NULL) = (key_fingerprint IS NULL))
);
COMMENT ON TABLE shell.secrets IS
    'A user''s secrets, each encrypted to an executor''s key (shell.secrets_keys). A deleted one keeps its row '
    'without a value, so that setting it again gives a new version, never a version already recorded.';

ALTER TABLE shell.sessions ADD COLUMN secrets text[] DEFAULT '{}'::text[] NOT NULL;
COMMENT ON COLUMN shell.sessions.secrets IS
    'The names of its user''s secrets the session''s commands get in their environment.';
ALTER TABLE shell.commands ADD COLUMN secrets jsonb;
COMMENT ON COLUMN shell.commands.secrets IS
    'The secrets handed to the command, [{"name", "version"}] (version null: named by the session but not set); '
    'null for none.';

CREATE FUNCTION shell.check_secret_name(p_name text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO ''
    AS $$
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z_][A-Za-z0-9_]{0,63}$' THEN
        RAISE EXCEPTION 'not a secret name: %', coalesce(left(p_name, 100), 'null') USING ERRCODE = '22023',
            HINT = 'A shell variable name: a letter or _, then up to 63 letters, digits or _.';
    END IF;
    -- The session's state and the shell own these: a secret would be
    -- overwritten by them, or would break the command's shell.
    IF p_name IN ('HOME', 'PATH', 'PWD', 'OLDPWD', 'SHELL', 'SHLVL', 'IFS', 'USER', 'LOGNAME', 'TERM',
                  'HOSTNAME', 'UID', 'EUID', 'PPID', 'PS1', 'PS2', 'PS4', 'COLUMNS', 'LINES', 'LANG')
       OR p_name ~ '^(BASH|PG_SHELL_|__pg_shell)' THEN
        RAISE EXCEPTION 'secret name % belongs to the shell', p_name USING ERRCODE = '22023',
            HINT = 'Choose another name: the shell or the session sets this variable.';
    END IF;
END
$$;

COMMENT ON FUNCTION shell.check_secret_name(text) IS
    '22023 unless p_name is a shell variable name the shell and the session leave to the user.';

CREATE FUNCTION shell.check_session_secrets(p_user_id uuid, p_secrets text[]) RETURNS text[]
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO ''
    AS $$
DECLARE
    wanted text;
BEGIN
    IF cardinality(p_secrets) > 100 THEN
        RAISE EXCEPTION 'a session may use at most 100 secrets' USING ERRCODE = '22023';
    END IF;
    FOREACH wanted IN ARRAY coalesce(p_secrets, '{}') LOOP
        PERFORM shell.check_secret_name(wanted);
        IF NOT EXISTS (SELECT FROM shell.secrets s
                       WHERE s.user_id = p_user_id AND s.name = wanted AND s.ciphertext IS NOT NULL) THEN
            RAISE EXCEPTION 'no secret %', wanted USING ERRCODE = '22023',
                HINT = 'Set it first with set_secret; list_secrets shows yours.';
        END IF;
    END LOOP;
    RETURN ARRAY(SELECT DISTINCT unnest(coalesce(p_secrets, '{}')) ORDER BY 1);
END
$$;

COMMENT ON FUNCTION shell.check_session_secrets(uuid, text[]) IS
    'The secret names a session of the user is to use, sorted and without repeats; 22023 for more than 100, '
    'a bad name, or one the user has not set.';

CREATE FUNCTION shell.register_secrets_key(p_fingerprint text, p_public_key text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO ''
    AS $$
BEGIN
    IF p_fingerprint IS NULL OR p_fingerprint !~ '^[0-9A-F]{40}$' THEN
        RAISE EXCEPTION 'not an OpenPGP v4 fingerprint: %', left(p_fingerprint, 100) USING ERRCODE = '22023';
    END IF;
    BEGIN
        PERFORM shell.pgp_pub_encrypt('probe', shell.dearmor(p_public_key));
    EXCEPTION WHEN others THEN
        RAISE EXCEPTION 'not a public key secrets can be encrypted to: %', SQLERRM USING ERRCODE = '22023',
            HINT = 'Give the key pg-shell secrets-key made (one RSA encryption subkey).';
    END;
    INSERT INTO shell.secrets_keys AS k (fingerprint, public_key) VALUES (p_fingerprint, p_public_key)
    ON CONFLICT (fingerprint) DO UPDATE SET registered_at = now(), public_key = excluded.public_key;
END
$$;

COMMENT ON FUNCTION shell.register_secrets_key(text, text) IS
    'Executor, at start-up: the public key of its secrets key, the one set_secret encrypts to from now on. '
    '22023 for a bad fingerprint or a key pgcrypto cannot encrypt to.';

CREATE FUNCTION shell.secrets_key_in_use() RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO ''
    AS $$
    SELECT s.key_fingerprint FROM shell.secrets s
    WHERE s.key_fingerprint IS NOT NULL ORDER BY s.updated_at DESC LIMIT 1
$$;

COMMENT ON FUNCTION shell.secrets_key_in_use() IS
    'Executor, at start-up without a key file: the key the newest stored secret is encrypted to (null: none), '
    'so that it copies that key rather than making another one.';

CREATE FUNCTION shell_api.set_secret(p_name text, p_value text) RETURNS json
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO ''
    AS $$
DECLARE
    me uuid := shell.current_user_id();
    key shell.secrets_keys;
    stored integer;
BEGIN
    PERFORM shell.check_secret_name(p_name);
    IF p_value IS NULL OR length(p_value) < 4 THEN
        RAISE EXCEPTION 'a secret''s value must be at least 4 characters' USING ERRCODE = '22023',
            HINT = 'Its value is masked wherever it appears in output; a shorter one would mask ordinary text.';
    END IF;
    IF octet_length(p_value) > 65536 THEN
        RAISE EXCEPTION 'a secret''s value must be at most 64 KiB (this one is % bytes)', octet_length(p_value)
            USING ERRCODE = '22023';
    END IF;
    SELECT * INTO key FROM shell.secrets_keys k ORDER BY k.registered_at DESC LIMIT 1;
    IF key.fingerprint IS NULL THEN
        RAISE EXCEPTION 'no executor has registered a key to encrypt secrets to' USING ERRCODE = '55000',
            HINT = 'An administrator starts an executor with PG_SHELL_SECRETS_KEY_FILE set.';
    END IF;
    PERFORM FROM shell.users u WHERE u.id = me FOR NO KEY UPDATE;  -- one count at a time per user
    IF NOT EXISTS (SELECT FROM shell.secrets s WHERE s.user_id = me AND s.name = p_name)
       AND (SELECT count(*) FROM shell.secrets s WHERE s.user_id = me AND s.ciphertext IS NOT NULL) >= 100 THEN
        RAISE EXCEPTION 'secret quota reached (100 secrets)' USING ERRCODE = 'PT429',
            HINT = 'Delete secrets you no longer need.';
    END IF;
    INSERT INTO shell.secrets AS s (user_id, name, ciphertext, key_fingerprint)
    VALUES (me, p_name, shell.pgp_pub_encrypt(p_value, shell.dearmor(key.public_key), 'cipher-algo=aes256'),
            key.fingerprint)
    ON CONFLICT (user_id, name) DO UPDATE SET version = s.version + 1, ciphertext = excluded.ciphertext,
        key_fingerprint = excluded.key_fingerprint, updated_at = now()
    RETURNING s.version INTO stored;
    RETURN json_build_object('name', p_name, 'version', stored);
END
$$;

COMMENT ON FUNCTION shell_api.set_secret(p_name text, p_value text) IS
    'Sets one of the caller''s secrets, encrypted to the executors'' key; returns {"name", "version"} (each set '
    'is a new version). Sessions that name it get it from their next command. 22023 for a bad name or a value '
    'not 4 characters to 64 KiB, 55000 when no executor registered a key, PT429 past 100 secrets.';

CREATE FUNCTION shell_api.delete_secret(p_name text) RETURNS json
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO ''
    AS $$
DECLARE
    me uuid := shell.current_user_id();
    deleted integer;
BEGIN
    PERFORM shell.check_secret_name(p_name);
    UPDATE shell.secrets s SET ciphertext = NULL, key_fingerprint = NULL, updated_at = now()
    WHERE s.user_id = me AND s.name = p_name AND s.ciphertext IS NOT NULL
    RETURNING s.version INTO deleted;
    IF deleted IS NULL THEN
        RAISE EXCEPTION 'no secret %', left(p_name, 100) USING ERRCODE = '22023',
            HINT = 'list_secrets shows yours.';
    END IF;
    RETURN json_build_object('name', p_name, 'version', deleted);
END
$$;

COMMENT ON FUNCTION shell_api.delete_secret(p_name text) IS
    'Deletes one of the caller''s secrets; returns the name and the version deleted. The next command of a '
    'session naming it fails, saying so. 22023 for a bad name or one the caller has no secret of.';

CREATE FUNCTION shell_api.list_secrets() RETURNS TABLE(name text, version integer, updated_at timestamp with time zone)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO ''
    AS $$
DECLARE
    me uuid := shell.current_user_id();  -- refused when not signed in, even with no secrets
BEGIN
    RETURN QUERY
    SELECT s.name, s.version, s.updated_at FROM shell.secrets s
    WHERE s.user_id = me AND s.ciphertext IS NOT NULL
    ORDER BY s.name;
END
$$;

COMMENT ON FUNCTION shell_api.list_secrets() IS
    'The caller''s secrets: name, version and when it was set; never a value.';

DROP FUNCTION shell_api.create_session(text, text);
CREATE FUNCTION shell_api.create_session(p_name text DEFAULT NULL::text, p_template text DEFAULT NULL::text,
                                         p_secrets text[] DEFAULT NULL::text[]) RETURNS uuid
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO ''
    AS $$
DECLARE
    me uuid := shell.current_user_id();
    chosen text := coalesce(p_template, 'base');
    names text[] := shell.check_session_secrets(me, p_secrets);
    new_id uuid;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM shell.usable_templates(me) t WHERE t.name = chosen) THEN
        RAISE EXCEPTION 'no template %', left(chosen, 100) USING ERRCODE = '22023',
            HINT = 'Templates you may use: '
                   || (SELECT string_agg(t.name, ', ') FROM shell.usable_templates(me) t) || '.';
    END IF;
    new_id := shell.new_session(me, p_name, '/home/sandbox', '{}'::jsonb);
    UPDATE shell.sessions s SET template = chosen, secrets = names WHERE s.id = new_id;
    RETURN new_id;
END
$$;

COMMENT ON FUNCTION shell_api.create_session(p_name text, p_template text, p_secrets text[]) IS
    'Starts a new session of the caller (home /home/sandbox, no files) on a template (default base), optionally '
    'named, whose commands get the named secrets in their environment; returns its id. 22023 for a name not '
    '1-200 characters, a template the caller may not use (the hint lists those it may) or a secret the caller '
    'has not set, PT429 when max_sessions unarchived sessions exist.';

CREATE FUNCTION shell_api.set_session_secrets(p_session_id uuid, p_secrets text[]) RETURNS text[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO ''
    AS $$
DECLARE
    target shell.sessions := shell.owned_session(p_session_id);
    names text[] := shell.check_session_secrets(target.user_id, p_secrets);
BEGIN
    UPDATE shell.sessions s SET secrets = names WHERE s.id = target.id;
    RETURN names;
END
$$;

COMMENT ON FUNCTION shell_api.set_session_secrets(p_session_id uuid, p_secrets text[]) IS
    'The secrets the session''s commands get, from its next claimed command on (empty: none); returns the names '
    'kept. create_session''s secret errors; 22023 for an unknown session, PT409 for an archived one.';

-- As before, with the secrets each session names.
DROP FUNCTION shell_api.list_sessions();
CREATE FUNCTION shell_api.list_sessions() RETURNS TABLE(id uuid, name text, cwd text, created_at timestamp with time zone, last_active_at timestamp with time zone, forked_from_command_id bigint, replay_of_session_id uuid, forked_from_session_id uuid, secrets text[])
    LANGUAGE sql STABLE
    SET search_path TO ''
    AS $$
    SELECT s.id, s.name, s.cwd, s.created_at, s.last_active_at, s.forked_from_command_id,
           s.replay_of_session_id, f.session_id, s.secrets
    FROM shell.sessions s
    LEFT JOIN shell.commands f ON f.id = s.forked_from_command_id
    WHERE s.user_id = (SELECT shell.current_user_id()) AND s.archived_at IS NULL
    ORDER BY s.last_active_at DESC, s.id
$$;

COMMENT ON FUNCTION shell_api.list_sessions() IS
    'The caller''s sessions that are not archived, most recently active first, with where each came from: '
    'the command and session it was forked from, the session it replays; and the names of the secrets its '
    'commands get.';

-- A fork or a replay uses the secrets its source session named.
CREATE OR REPLACE FUNCTION shell.new_session(p_user_id uuid, p_name text, p_cwd text, p_env jsonb, p_forked_from bigint DEFAULT NULL::bigint, p_replay_of uuid DEFAULT NULL::uuid) RETURNS uuid
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO ''
    AS $$
DECLARE
    quota integer;
    new_id uuid;
BEGIN
    IF p_name IS NOT NULL AND length(p_name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'session name must be 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
    -- The row lock serializes this user's session creation, so the count
    -- below cannot be raced past the quota.
    SELECT u.max_sessions INTO quota FROM shell.users u WHERE u.id = p_user_id FOR NO KEY UPDATE;
    IF (SELECT count(*) FROM shell.sessions s
        WHERE s.user_id = p_user_id AND s.archived_at IS NULL) >= quota THEN
        RAISE EXCEPTION 'session quota reached (% sessions)', quota USING ERRCODE = 'PT429',
            HINT = 'Archive sessions you no longer need, or ask an administrator to raise max_sessions.';
    END IF;
    INSERT INTO shell.sessions (user_id, name, cwd, env, forked_from_command_id, replay_of_session_id, secrets)
    VALUES (p_user_id, p_name, p_cwd, p_env, p_forked_from, p_replay_of,
            coalesce((SELECT s.secrets FROM shell.sessions s WHERE s.id = p_replay_of AND s.user_id = p_user_id),
                     (SELECT s.secrets FROM shell.commands c JOIN shell.sessions s ON s.id = c.session_id
                      WHERE c.id = p_forked_from AND s.user_id = p_user_id),
                     '{}'))
    RETURNING id INTO new_id;
    INSERT INTO shell.lanes (session_id, user_id) VALUES (new_id, p_user_id);
    RETURN new_id;
END
$$;

CREATE FUNCTION shell.session_secrets(p_session_id uuid) RETURNS jsonb
    LANGUAGE sql STABLE
    SET search_path TO ''
    AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'name', n.name, 'version', CASE WHEN x.ciphertext IS NOT NULL THEN x.version END,
               'key', x.key_fingerprint, 'value', encode(x.ciphertext, 'base64')) ORDER BY n.name), '[]'::jsonb)
    FROM shell.sessions s
    CROSS JOIN unnest(s.secrets) n(name)
    LEFT JOIN shell.secrets x ON x.user_id = s.user_id AND x.name = n.name
    WHERE s.id = p_session_id
$$;

COMMENT ON FUNCTION shell.session_secrets(uuid) IS
    'The secrets the session names, as a claim hands them to the executor: name, version, the key''s '
    'fingerprint and the ciphertext (base64); version, key and value null for one not set.';

-- As before, with the secrets the command gets (their ciphertext; the row keeps names and versions).
DROP FUNCTION shell.claim_commands(text, integer, integer, text, integer, text[], integer);
CREATE FUNCTION shell.claim_commands(p_worker_id text, p_limit integer, p_lease_seconds integer DEFAULT 30, p_host text DEFAULT NULL::text, p_grace_ms integer DEFAULT 0, p_templates text[] DEFAULT NULL::text[], p_template_wait_ms integer DEFAULT 0) RETURNS TABLE(command_id bigint, session_id uuid, user_id uuid, command text, cwd text, env jsonb, attempt integer, image_digest text, root text, upload jsonb, template text, runtime text, secrets jsonb)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO ''
    AS $$
#variable_conflict use_column
DECLARE
    lane record;
    head_id bigint;
    seq bigint;
    claimed integer := 0;
    handed jsonb;
    scanned integer := 0;
    -- Read with FETCH, one lane at a time, so only the lanes examined are
    -- locked: a FOR loop prefetches rows and would lock lanes it never
    -- claims, holding other sessions back until this transaction ends.
    ready_lanes CURSOR FOR
        SELECT l.session_id, l.user_id, l.cached_on, l.ready_since,
               (SELECT s.template FROM shell.sessions s WHERE s.id = l.session_id) AS template
        FROM shell.lanes l
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
    IF p_template_wait_ms IS NULL OR p_template_wait_ms NOT BETWEEN 0 AND 3600000 THEN
        RAISE EXCEPTION 'p_template_wait_ms must be between 0 and 3600000' USING ERRCODE = '22023';
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
        -- A template this host has no image for: left to the hosts that
        -- have one, then taken, so that the command fails saying why
        -- instead of waiting for a host that may not exist.
        CONTINUE WHEN p_templates IS NOT NULL AND NOT lane.template = ANY (p_templates)
                  AND lane.ready_since > clock_timestamp() - make_interval(secs => p_template_wait_ms / 1000.0);
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
        handed := shell.session_secrets(lane.session_id);
        RETURN QUERY
        UPDATE shell.commands c SET status = 'claimed', worker_id = p_worker_id,
            attempts = c.attempts + 1, claimed_at = now(),
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            cwd_before = s.cwd, env_before = s.env, root_before = s.root, change_seq = seq,
            secrets = CASE WHEN c.upload IS NULL AND handed <> '[]'::jsonb
                           THEN (SELECT jsonb_agg(h - 'value' - 'key') FROM jsonb_array_elements(handed) h) END
        FROM shell.sessions s
        WHERE c.id = head_id AND s.id = c.session_id
        RETURNING c.id, c.session_id, c.user_id, c.command, c.cwd_before, c.env_before, c.attempts,
                  c.image_digest, c.root_before, c.upload, s.template,
                  (SELECT u.runtime FROM shell.users u WHERE u.id = c.user_id),
                  CASE WHEN c.upload IS NULL THEN handed ELSE '[]'::jsonb END;
        claimed := claimed + 1;
    END LOOP;
    CLOSE ready_lanes;
END
$$;

COMMENT ON FUNCTION shell.claim_commands(text, integer, integer, text, integer, text[], integer) IS
    'Executor: claims the head command of up to p_limit sessions with nothing running, oldest-ready first, '
    'within each user''s max_running, leased for p_lease_seconds; a session another host holds the files of '
    '(cached_on) is left to it for p_grace_ms, and one whose template is not in p_templates (the templates '
    'this host has an image for; null: all) is left to other hosts for p_template_wait_ms. Returns what to '
    'run, with its session''s template, its user''s runtime (null: the executor''s default) and the secrets '
    'its session names (shell.session_secrets). 22023 for a bad worker id, limit, lease, grace or wait.';

-- Version 7 of the result record adds the secrets the command got, by name and version.
CREATE OR REPLACE FUNCTION shell.result_facts(c shell.commands) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT jsonb_build_object(
        'command_id', c.id, 'session_id', c.session_id::text, 'user_id', c.user_id::text,
        'command_sha256', shell.sha256_hex(c.command), 'status', c.status,
        'exit_code', c.exit_code, 'reason', c.reason, 'truncated', c.truncated,
        'output_sha256', shell.sha256_hex(shell.output_of(c)),
        'cwd_before', c.cwd_before, 'env_before', c.env_before,
        'cwd_after', c.cwd_after, 'env_after', c.env_after,
        'image_digest', c.image_digest, 'worker_id', c.worker_id, 'attempt', c.attempts,
        'duration_ms', c.duration_ms, 'root_before', c.root_before, 'root_after', c.root_after,
        'upload', c.upload, 'runtime', c.runtime, 'secrets', c.secrets)
$$;

COMMENT ON FUNCTION shell.result_facts(shell.commands) IS
    'The facts of an ended command that its result record vouches for (version 7: hashes of command and '
    'output, state and roots before and after, upload, runtime, secrets by name and version...). Keep in step '
    'with executor/audit/records.py.';

CREATE OR REPLACE FUNCTION shell.chain_result(p_command_id bigint, p_record text DEFAULT NULL::text, p_signature text DEFAULT NULL::text, p_key_id text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO ''
    AS $_$
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
    SELECT l.chain_seq + 1, l.chain_head INTO seq, prev FROM shell.lanes l
    WHERE l.session_id = c.session_id FOR UPDATE;
    facts := shell.result_facts(c);
    IF rec IS NULL THEN
        rec := ((facts - 'runtime' - 'secrets') || jsonb_build_object(
            'v', 4, 'signer', 'database', 'started_at', shell.utc_text(c.started_at),
            'finished_at', shell.utc_text(c.completed_at), 'chain_seq', seq, 'chain_prev', prev))::text;
    ELSE
        BEGIN
            claimed := rec::jsonb;
        EXCEPTION WHEN others THEN
            RAISE EXCEPTION 'result record is not JSON' USING ERRCODE = '22023';
        END;
        IF jsonb_typeof(claimed) <> 'object' THEN
            RAISE EXCEPTION 'result record is not a JSON object' USING ERRCODE = '22023';
        END IF;
        IF jsonb_typeof(claimed -> 'v') <> 'number' THEN
            RAISE EXCEPTION 'result record has no version' USING ERRCODE = '22023';
        END IF;
        IF (claimed ->> 'v')::numeric >= 3 THEN
            facts := facts || jsonb_build_object('chain_seq', seq, 'chain_prev', prev);
        END IF;
        IF (claimed ->> 'v')::numeric < 4 THEN
            facts := facts - 'upload';
        END IF;
        IF (claimed ->> 'v')::numeric < 6 THEN
            facts := facts - 'runtime';
        END IF;
        IF (claimed ->> 'v')::numeric < 7 THEN
            facts := facts - 'secrets';
        END IF;
        FOR field IN SELECT jsonb_object_keys(facts) LOOP
            IF claimed -> field IS DISTINCT FROM facts -> field THEN
                RAISE EXCEPTION 'result record disagrees with the command on %', field
                    USING ERRCODE = '22023',
                    DETAIL = format('record says %s, the command has %s',
                                    coalesce((claimed -> field)::text, 'nothing'), (facts -> field)::text),
                    HINT = 'From version 3 on, read chain_seq and chain_prev with '
                           'shell.chain_position in the transaction that completes.';
            END IF;
        END LOOP;
        IF p_signature IS NULL OR p_signature !~ '^[0-9a-f]{128}$'
           OR claimed ->> 'signer' IS DISTINCT FROM p_key_id
           OR NOT EXISTS (SELECT FROM shell.signing_keys k WHERE k.key_id = p_key_id) THEN
            RAISE EXCEPTION 'result record is not signed by a registered key' USING ERRCODE = '22023',
                HINT = 'Register the key with shell.register_signing_key first.';
        END IF;
    END IF;
    UPDATE shell.lanes l SET chain_seq = seq, chain_head = shell.sha256_hex(prev || rec)
    WHERE l.session_id = c.session_id;
    UPDATE shell.commands SET result_record = rec, signature = p_signature,
        key_id = CASE WHEN p_record IS NULL THEN NULL ELSE p_key_id END,
        chain_seq = seq, chain_prev = prev, chain_hash = shell.sha256_hex(prev || rec)
    WHERE id = p_command_id;
END
$_$;

COMMENT ON FUNCTION shell.chain_result(p_command_id bigint, p_record text, p_signature text, p_key_id text) IS 'Appends an ended command to its session''s hash chain: with the executor''s signed record, checked against the facts (and from version 3 its chain position), or else one built here (version 4, signer database). 22023 for a record that disagrees or is not signed by a registered key.';

-- As before, with the secrets (pg-shell audit verify checks them against version 7 records).
DROP FUNCTION shell.audit_history(uuid);
CREATE FUNCTION shell.audit_history(p_session_id uuid DEFAULT NULL::uuid) RETURNS TABLE(session_id uuid, command_id bigint, chain_seq bigint, chain_prev text, chain_hash text, result_record text, signature text, key_id text, user_id uuid, command text, status text, exit_code integer, reason text, truncated boolean, output text, cwd_before text, env_before jsonb, cwd_after text, env_after jsonb, image_digest text, worker_id text, attempt integer, duration_ms integer, chunks_sha256 text, root_before text, root_after text, upload jsonb, runtime text, secrets jsonb)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO ''
    AS $$
    SELECT c.session_id, c.id, c.chain_seq, c.chain_prev, c.chain_hash, c.result_record, c.signature,
           c.key_id, c.user_id, c.command, c.status, c.exit_code, c.reason, c.truncated,
           shell.output_of(c), c.cwd_before, c.env_before, c.cwd_after, c.env_after, c.image_digest,
           c.worker_id, c.attempts, c.duration_ms, NULL::text, c.root_before, c.root_after, c.upload,
           c.runtime, c.secrets
    FROM shell.commands c
    WHERE (p_session_id IS NULL OR c.session_id = p_session_id)
      AND (c.status IN ('done', 'failed', 'cancelled') OR c.chain_seq IS NOT NULL)
    ORDER BY c.session_id, c.chain_seq NULLS LAST, c.id
$$;

COMMENT ON FUNCTION shell.audit_history(uuid) IS
    'Administrator (pg-shell audit verify, export): every ended or chained command, of one session or all, in '
    'chain order per session, with its record, signature and the row fields the record is checked against.';
