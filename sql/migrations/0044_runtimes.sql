-- Runtimes: the container runtime a command runs under (runc, the kernel's
-- own namespaces; runsc, gVisor's kernel in user space). An administrator
-- may put a user on a runtime (`pg-shell user runtime NAME RUNTIME`); null
-- leaves the executor's default (PG_SHELL_RUNTIME). The executor learns the
-- user's choice when it claims a command or warms a session's container, and
-- records the runtime the command ran under; result records from version 6
-- on vouch for it. The names are the engine's: only executors know which
-- exist, so here they are only checked to be names.

ALTER TABLE shell.users ADD COLUMN runtime text
    CONSTRAINT users_runtime_check CHECK (runtime ~ '^[a-z][a-z0-9_-]{0,39}$');
COMMENT ON COLUMN shell.users.runtime IS
    'The container runtime the user''s commands run under (null: each executor''s PG_SHELL_RUNTIME).';
ALTER TABLE shell.commands ADD COLUMN runtime text;
COMMENT ON COLUMN shell.commands.runtime IS
    'The container runtime the command ran under (null: not started, or by an executor from before 0044).';

CREATE FUNCTION shell.set_user_runtime(p_username text, p_runtime text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO ''
    AS $$
DECLARE
    target uuid;
BEGIN
    IF p_runtime IS NOT NULL AND p_runtime !~ '^[a-z][a-z0-9_-]{0,39}$' THEN
        RAISE EXCEPTION 'not a runtime name: %', p_runtime USING ERRCODE = '22023',
            HINT = 'A lowercase letter, then up to 39 lowercase letters, digits, - or _ (runc, runsc).';
    END IF;
    UPDATE shell.users u SET runtime = p_runtime WHERE u.username = p_username RETURNING u.id INTO target;
    IF target IS NULL THEN
        RAISE EXCEPTION 'no user %', p_username USING ERRCODE = '22023';
    END IF;
    RETURN p_runtime;
END
$$;

COMMENT ON FUNCTION shell.set_user_runtime(p_username text, p_runtime text) IS
    'Administrator (pg-shell user runtime): the container runtime the user''s commands run under from their next '
    'start on (null: the executor''s default). 22023 for an unknown user or a name that is not one.';

-- As before, with the user's runtime.
DROP FUNCTION shell.claim_commands(text, integer, integer, text, integer, text[], integer);
CREATE FUNCTION shell.claim_commands(p_worker_id text, p_limit integer, p_lease_seconds integer DEFAULT 30, p_host text DEFAULT NULL::text, p_grace_ms integer DEFAULT 0, p_templates text[] DEFAULT NULL::text[], p_template_wait_ms integer DEFAULT 0) RETURNS TABLE(command_id bigint, session_id uuid, user_id uuid, command text, cwd text, env jsonb, attempt integer, image_digest text, root text, upload jsonb, template text, runtime text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO ''
    AS $$
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
        RETURN QUERY
        UPDATE shell.commands c SET status = 'claimed', worker_id = p_worker_id,
            attempts = c.attempts + 1, claimed_at = now(),
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            cwd_before = s.cwd, env_before = s.env, root_before = s.root, change_seq = seq
        FROM shell.sessions s
        WHERE c.id = head_id AND s.id = c.session_id
        RETURNING c.id, c.session_id, c.user_id, c.command, c.cwd_before, c.env_before, c.attempts,
                  c.image_digest, c.root_before, c.upload, s.template,
                  (SELECT u.runtime FROM shell.users u WHERE u.id = c.user_id);
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
    'run, with its session''s template and its user''s runtime (null: the executor''s default). 22023 for a '
    'bad worker id, limit, lease, grace or wait.';

-- As before, with the user's runtime (a warm container starts under it).
DROP FUNCTION shell.host_sessions(uuid[]);
CREATE FUNCTION shell.host_sessions(p_session_ids uuid[]) RETURNS TABLE(session_id uuid, user_id uuid, archived boolean, stored boolean, template text, runtime text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO ''
    AS $$
    SELECT s.id, s.user_id, s.archived_at IS NOT NULL, s.root IS NOT NULL, s.template,
           (SELECT u.runtime FROM shell.users u WHERE u.id = s.user_id)
    FROM shell.sessions s
    WHERE s.id = ANY (p_session_ids)
$$;

COMMENT ON FUNCTION shell.host_sessions(uuid[]) IS
    'Executor and cleanup agent: of the sessions a host holds copies of, the owner of each, whether it is '
    'archived, whether its files are stored in the database, its template and its user''s runtime; sessions '
    'not known are left out.';

-- As before, with the runtime the container runs under.
DROP FUNCTION shell.mark_started(bigint, text, integer, text, text);
CREATE FUNCTION shell.mark_started(p_command_id bigint, p_worker_id text, p_attempt integer, p_container_id text, p_image_digest text,
                                   p_runtime text DEFAULT NULL) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO ''
    AS $$
DECLARE
    lease record := shell.leased_command(p_command_id, p_worker_id, p_attempt, ARRAY['claimed', 'running']);
    cmd shell.commands := lease.leased;
BEGIN
    IF cmd.status = 'running' THEN
        IF cmd.container_id IS DISTINCT FROM p_container_id THEN
            PERFORM shell.lease_lost(p_command_id, p_worker_id, p_attempt, cmd);
        END IF;
        RETURN;
    END IF;
    UPDATE shell.commands c SET status = 'running', started_at = now(), container_id = p_container_id,
        image_digest = p_image_digest, runtime = p_runtime, change_seq = lease.change
    WHERE c.id = p_command_id;
END
$$;

COMMENT ON FUNCTION shell.mark_started(bigint, text, integer, text, text, text) IS
    'Executor: the command''s container runs (status running, with the image digest and the runtime). '
    'Repeating it for the same container changes nothing; PS001 when the lease is lost.';

-- Version 6 of the result record adds the runtime.
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
        'upload', c.upload, 'runtime', c.runtime)
$$;

COMMENT ON FUNCTION shell.result_facts(shell.commands) IS
    'The facts of an ended command that its result record vouches for (version 6: hashes of command and '
    'output, state and roots before and after, upload, runtime...). Keep in step with executor/audit/records.py.';

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
        rec := ((facts - 'runtime') || jsonb_build_object(
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

CREATE OR REPLACE FUNCTION shell.changes_page(p_session_id uuid, p_after_change bigint, p_limit integer, OUT commands shell.commands[], OUT after_change bigint) RETURNS record
    LANGUAGE plpgsql STABLE
    SET search_path TO ''
    AS $$
BEGIN
    PERFORM shell.current_user_id();
    PERFORM shell.check_page(p_after_change, p_limit);
    IF NOT EXISTS (SELECT FROM shell.sessions s WHERE s.id = p_session_id) THEN
        PERFORM shell.session_not_found();
    END IF;
    -- A cursor from the future would wait for a change that never comes.
    after_change := least(p_after_change, coalesce(
        (SELECT max(c.change_seq) FROM shell.commands c WHERE c.session_id = p_session_id), 0));
    commands := ARRAY(SELECT page FROM (
                          SELECT c FROM shell.commands c
                          WHERE c.session_id = p_session_id AND c.change_seq > after_change
                          ORDER BY c.change_seq LIMIT p_limit) page(page)
                      ORDER BY (page).id);
END
$$;

-- As before, with the runtime (pg-shell audit verify checks it against version 6 records).
DROP FUNCTION shell.audit_history(uuid);
CREATE FUNCTION shell.audit_history(p_session_id uuid DEFAULT NULL::uuid) RETURNS TABLE(session_id uuid, command_id bigint, chain_seq bigint, chain_prev text, chain_hash text, result_record text, signature text, key_id text, user_id uuid, command text, status text, exit_code integer, reason text, truncated boolean, output text, cwd_before text, env_before jsonb, cwd_after text, env_after jsonb, image_digest text, worker_id text, attempt integer, duration_ms integer, chunks_sha256 text, root_before text, root_after text, upload jsonb, runtime text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO ''
    AS $$
    SELECT c.session_id, c.id, c.chain_seq, c.chain_prev, c.chain_hash, c.result_record, c.signature,
           c.key_id, c.user_id, c.command, c.status, c.exit_code, c.reason, c.truncated,
           shell.output_of(c), c.cwd_before, c.env_before, c.cwd_after, c.env_after, c.image_digest,
           c.worker_id, c.attempts, c.duration_ms, NULL::text, c.root_before, c.root_after, c.upload,
           c.runtime
    FROM shell.commands c
    WHERE (p_session_id IS NULL OR c.session_id = p_session_id)
      AND (c.status IN ('done', 'failed', 'cancelled') OR c.chain_seq IS NOT NULL)
    ORDER BY c.session_id, c.chain_seq NULLS LAST, c.id
$$;

COMMENT ON FUNCTION shell.audit_history(uuid) IS
    'Administrator (pg-shell audit verify, export): every ended or chained command, of one session or all, in '
    'chain order per session, with its record, signature and the row fields the record is checked against.';
