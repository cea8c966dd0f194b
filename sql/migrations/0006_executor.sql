-- Executor entry points (role shell_executor). A command's lease is owned by
-- (worker_id, attempt); every transition checks both and the current status,
-- and leases are measured with the database's clock only.

CREATE FUNCTION shell.lease_lost(p_command_id bigint, p_worker_id text, p_attempt integer, p_found shell.commands)
RETURNS void
LANGUAGE plpgsql SET search_path = '' AS $$
BEGIN
    RAISE EXCEPTION 'lease lost on command %', p_command_id USING ERRCODE = '55000',
        DETAIL = format('expected worker %s attempt %s, found status %s worker %s attempt %s',
                        p_worker_id, p_attempt, coalesce(p_found.status, 'missing'),
                        coalesce(p_found.worker_id, '-'), coalesce(p_found.attempts::text, '-'));
END
$$;

-- Locks the command's lane, then the command (the lock order of every
-- transition), checks the lease and status, and returns the command with
-- the lane's next change number.
CREATE FUNCTION shell.leased_command(
    p_command_id bigint, p_worker_id text, p_attempt integer, p_statuses text[],
    OUT leased shell.commands, OUT change bigint
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    UPDATE shell.lanes l SET change_seq = l.change_seq + 1
    WHERE l.session_id = (SELECT c.session_id FROM shell.commands c WHERE c.id = p_command_id)
    RETURNING l.change_seq INTO change;
    SELECT * INTO leased FROM shell.commands c WHERE c.id = p_command_id FOR UPDATE;
    IF leased.id IS NULL OR leased.worker_id IS DISTINCT FROM p_worker_id
       OR leased.attempts IS DISTINCT FROM p_attempt OR NOT leased.status = ANY (p_statuses) THEN
        PERFORM shell.lease_lost(p_command_id, p_worker_id, p_attempt, leased);
    END IF;
END
$$;

CREATE FUNCTION shell.check_worker(p_worker_id text, p_lease_seconds integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = '' AS $$
BEGIN
    IF p_worker_id IS NULL OR p_worker_id !~ '^[A-Za-z0-9_.:@-]{1,200}$' THEN
        RAISE EXCEPTION 'invalid worker id' USING ERRCODE = '22023';
    END IF;
    IF p_lease_seconds IS NULL OR p_lease_seconds NOT BETWEEN 1 AND 3600 THEN
        RAISE EXCEPTION 'lease must be 1 to 3600 seconds' USING ERRCODE = '22023';
    END IF;
END
$$;

-- Claims the head command of up to p_limit sessions that have nothing
-- running, oldest-ready session first. Lanes locked by others are skipped,
-- so a slow claimer never delays another session.
CREATE FUNCTION shell.claim_commands(p_worker_id text, p_limit integer, p_lease_seconds integer DEFAULT 30)
RETURNS TABLE (command_id bigint, session_id uuid, user_id uuid, command text, cwd text, env jsonb,
               attempt integer, image_digest text)
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
        SELECT l.session_id, l.user_id FROM shell.lanes l
        WHERE l.pending > 0 AND l.active_command_id IS NULL
        ORDER BY l.ready_since
        FOR UPDATE SKIP LOCKED;
BEGIN
    PERFORM shell.check_worker(p_worker_id, p_lease_seconds);
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 1000' USING ERRCODE = '22023';
    END IF;
    OPEN ready_lanes;
    LOOP
        -- Lanes skipped for a user's quota stay locked until commit; bound
        -- the scan so one tenant's backlog cannot make a claim expensive.
        EXIT WHEN claimed >= p_limit OR scanned >= p_limit * 4 + 32;
        FETCH ready_lanes INTO lane;
        EXIT WHEN NOT FOUND;
        scanned := scanned + 1;
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
            cwd_before = s.cwd, env_before = s.env, change_seq = seq
        FROM shell.sessions s
        WHERE c.id = head_id AND s.id = c.session_id
        RETURNING c.id, c.session_id, c.user_id, c.command, c.cwd_before, c.env_before, c.attempts, c.image_digest;
        claimed := claimed + 1;
    END LOOP;
    CLOSE ready_lanes;
END
$$;

-- Renews the leases the worker still holds; returns them, with whether the
-- tenant asked to cancel. A command missing from the answer is lost.
CREATE FUNCTION shell.heartbeat(p_worker_id text, p_command_ids bigint[], p_attempts integer[],
                                p_lease_seconds integer DEFAULT 30)
RETURNS TABLE (command_id bigint, cancel_requested boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    PERFORM shell.check_worker(p_worker_id, p_lease_seconds);
    RETURN QUERY
    UPDATE shell.commands c SET lease_expires_at = now() + make_interval(secs => p_lease_seconds)
    FROM unnest(p_command_ids, p_attempts) AS held(id, attempt)
    WHERE c.id = held.id AND c.attempts = held.attempt AND c.worker_id = p_worker_id
      AND c.status IN ('claimed', 'running')
    RETURNING c.id, c.cancel_requested_at IS NOT NULL;
END
$$;

-- The container exists and is about to start: from here on the command is
-- treated as started (it may have run), so it is never claimed again.
CREATE FUNCTION shell.mark_created(p_command_id bigint, p_worker_id text, p_attempt integer,
                                   p_container_id text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    lease record := shell.leased_command(p_command_id, p_worker_id, p_attempt, ARRAY['claimed']);
BEGIN
    UPDATE shell.commands c SET container_id = p_container_id, change_seq = lease.change
    WHERE c.id = p_command_id;
END
$$;

-- The container is running. Repeating the call for the same container (a
-- retry whose first answer was lost) changes nothing.
CREATE FUNCTION shell.mark_started(p_command_id bigint, p_worker_id text, p_attempt integer,
                                   p_container_id text, p_image_digest text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
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
        image_digest = p_image_digest, change_seq = lease.change
    WHERE c.id = p_command_id;
END
$$;

-- Idempotent per (command, seq): an executor retrying after an outage does
-- not duplicate output.
CREATE FUNCTION shell.append_output(p_command_id bigint, p_worker_id text, p_attempt integer,
                                    p_seq integer, p_data text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    lease record := shell.leased_command(p_command_id, p_worker_id, p_attempt, ARRAY['running']);
BEGIN
    INSERT INTO shell.output_chunks (command_id, seq, data) VALUES (p_command_id, p_seq, p_data)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        UPDATE shell.commands c SET output_bytes = c.output_bytes + octet_length(p_data),
            change_seq = lease.change
        WHERE c.id = p_command_id;
    END IF;
END
$$;

-- Ends a claimed or running command with its result and saves the shell
-- state it left behind (already validated by the executor) as the
-- session's state. p_record is the executor's signed result record; it must
-- agree with the other parameters and the stored output (22023 otherwise).
CREATE FUNCTION shell.complete_command(
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
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'invalid final status %', p_status USING ERRCODE = '22023';
    END IF;
    IF new_cwd NOT LIKE '/%' OR jsonb_typeof(new_env) <> 'object'
       OR EXISTS (SELECT FROM jsonb_each(new_env) e WHERE jsonb_typeof(e.value) <> 'string') THEN
        RAISE EXCEPTION 'invalid shell state' USING ERRCODE = '22023',
            DETAIL = 'cwd must be absolute and env an object of strings';
    END IF;
    UPDATE shell.commands c SET status = p_status, exit_code = p_exit_code, reason = p_reason,
        truncated = coalesce(p_truncated, false), completed_at = now(), duration_ms = p_duration_ms,
        cwd_after = new_cwd, env_after = new_env, lease_expires_at = NULL,
        output = shell.output_of(cmd), change_seq = lease.change
    WHERE c.id = p_command_id;
    PERFORM shell.chain_result(p_command_id, p_record, p_signature, p_key_id);
    UPDATE shell.sessions s SET cwd = new_cwd, env = new_env, last_active_at = now()
    WHERE s.id = cmd.session_id;
    UPDATE shell.lanes l SET active_command_id = NULL,
        ready_since = CASE WHEN l.pending > 0 THEN now() ELSE l.ready_since END
    WHERE l.session_id = cmd.session_id;
END
$$;

-- Takes a command back from a worker: one whose container never started
-- goes back to the head of its session's queue; one that started is failed,
-- because shell commands are not idempotent.
CREATE FUNCTION shell.release_command(p_command shell.commands, p_container_started boolean,
                                                 p_reason text, p_only_if_expired boolean)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    seq bigint;
    current shell.commands;
BEGIN
    UPDATE shell.lanes l SET change_seq = l.change_seq + 1
    WHERE l.session_id = p_command.session_id RETURNING l.change_seq INTO seq;
    SELECT * INTO current FROM shell.commands c WHERE c.id = p_command.id FOR UPDATE;
    IF current.status NOT IN ('claimed', 'running') OR current.attempts <> p_command.attempts
       OR (p_only_if_expired AND current.lease_expires_at >= now()) THEN
        RETURN current.status;  -- settled or renewed meanwhile
    END IF;
    IF current.status = 'claimed' AND NOT (p_container_started OR current.container_id IS NOT NULL) AND current.attempts < 5 THEN
        UPDATE shell.commands c SET status = 'pending', worker_id = NULL, lease_expires_at = NULL,
            claimed_at = NULL, cwd_before = NULL, env_before = NULL, change_seq = seq
        WHERE c.id = current.id;
        UPDATE shell.lanes l SET pending = l.pending + 1, active_command_id = NULL,
            ready_since = current.submitted_at
        WHERE l.session_id = current.session_id;
        RETURN 'pending';
    END IF;
    UPDATE shell.commands c SET status = 'failed', completed_at = now(), lease_expires_at = NULL,
        reason = CASE WHEN current.status = 'claimed' AND NOT (p_container_started OR current.container_id IS NOT NULL)
                      THEN 'gave up after ' || current.attempts || ' attempts' ELSE p_reason END,
        cwd_after = current.cwd_before, env_after = current.env_before,
        output = shell.output_of(current), change_seq = seq
    WHERE c.id = current.id;
    PERFORM shell.chain_result(current.id);
    UPDATE shell.lanes l SET active_command_id = NULL,
        ready_since = CASE WHEN l.pending > 0 THEN now() ELSE l.ready_since END
    WHERE l.session_id = current.session_id;
    RETURN 'failed';
END
$$;

-- Settles every command whose lease ran out.
CREATE FUNCTION shell.expire_leases() RETURNS TABLE (command_id bigint, status text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    expired shell.commands;
BEGIN
    FOR expired IN
        SELECT * FROM shell.commands c
        WHERE c.status IN ('claimed', 'running') AND c.lease_expires_at < now()
        ORDER BY c.id
    LOOP
        command_id := expired.id;
        status := shell.release_command(expired, expired.status = 'running', 'executor lost', true);
        RETURN NEXT;
    END LOOP;
END
$$;

-- A worker restarting under the same id settles what its predecessor held
-- at once. p_started_ids: commands whose containers the engine still has
-- (they may have run even if never marked running).
CREATE FUNCTION shell.settle_worker(p_worker_id text, p_started_ids bigint[] DEFAULT '{}')
RETURNS TABLE (command_id bigint, status text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    held shell.commands;
BEGIN
    PERFORM shell.check_worker(p_worker_id, 1);
    FOR held IN
        SELECT * FROM shell.commands c
        WHERE c.status IN ('claimed', 'running') AND c.worker_id = p_worker_id
        ORDER BY c.id
    LOOP
        command_id := held.id;
        status := shell.release_command(
            held, held.status = 'running' OR held.id = ANY (coalesce(p_started_ids, '{}')), 'executor lost', false);
        RETURN NEXT;
    END LOOP;
END
$$;

-- Which of these commands are still claimed or running (the container
-- reaper keeps their containers).
CREATE FUNCTION shell.live_commands(p_command_ids bigint[]) RETURNS SETOF bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT c.id FROM shell.commands c
    WHERE c.id = ANY (p_command_ids) AND c.status IN ('claimed', 'running')
$$;
