-- Templates where their image is. An executor names the templates it has
-- an image for when it claims: a session of another template is left to
-- the hosts that have its image for p_template_wait_ms, then any host takes
-- it (its command fails, naming the missing image) so that a template no
-- host has is reported instead of waiting forever. host_sessions says a
-- session's template, so that a warm start is made on the session's image.

-- As in 0039, with p_templates and p_template_wait_ms.
DROP FUNCTION shell.claim_commands(text, integer, integer, text, integer);
CREATE FUNCTION shell.claim_commands(p_worker_id text, p_limit integer, p_lease_seconds integer DEFAULT 30,
                                     p_host text DEFAULT NULL, p_grace_ms integer DEFAULT 0,
                                     p_templates text[] DEFAULT NULL, p_template_wait_ms integer DEFAULT 0)
RETURNS TABLE (command_id bigint, session_id uuid, user_id uuid, command text, cwd text, env jsonb,
               attempt integer, image_digest text, root text, upload jsonb, template text)
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
                  c.image_digest, c.root_before, c.upload, s.template;
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
    'run, with its session''s template. 22023 for a bad worker id, limit, lease, grace or wait.';

-- As in 0027, with the session's template.
DROP FUNCTION shell.host_sessions(uuid[]);
CREATE FUNCTION shell.host_sessions(p_session_ids uuid[])
RETURNS TABLE (session_id uuid, user_id uuid, archived boolean, stored boolean, template text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT s.id, s.user_id, s.archived_at IS NOT NULL, s.root IS NOT NULL, s.template
    FROM shell.sessions s
    WHERE s.id = ANY (p_session_ids)
$$;

COMMENT ON FUNCTION shell.host_sessions(uuid[]) IS
    'Executor and cleanup agent: of the sessions a host holds copies of, the owner of each, whether it is '
    'archived, whether its files are stored in the database and its template; sessions not known are left out.';
