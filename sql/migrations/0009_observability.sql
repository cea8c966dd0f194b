-- Observability: comparing a replay with its originals, playing output back
-- with its original timing, the queue depth metrics read, and incremental
-- usage reports for billing (`pg-shell usage`).

-- A replay run (the session replay_session returned) side by side with the
-- commands it re-ran, in order. An invoker function: row-level security
-- shows only the caller's rows, and a run that is missing or another
-- tenant's gives the same not-found error.
CREATE FUNCTION shell_api.replay_comparison(p_run_id uuid)
RETURNS TABLE (original_id bigint, replay_id bigint, command text,
               original_status text, original_exit_code integer, original_output text,
               original_image_digest text,
               replay_status text, replay_exit_code integer, replay_output text, replay_reason text,
               replay_image_digest text)
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    run shell.sessions;
BEGIN
    PERFORM shell.current_user_id();
    SELECT * INTO run FROM shell.sessions s WHERE s.id = p_run_id;
    IF run.id IS NULL THEN
        PERFORM shell.session_not_found();
    ELSIF run.replay_of_session_id IS NULL THEN
        RAISE EXCEPTION 'session % is not a replay run', p_run_id USING ERRCODE = '22023',
            HINT = 'Use an id returned by replay_session.';
    END IF;
    RETURN QUERY
    SELECT o.id, r.id, r.command,
           o.status, o.exit_code, CASE WHEN o.id IS NULL THEN NULL ELSE shell.output_of(o) END,
           o.image_digest,
           r.status, r.exit_code, shell.output_of(r), r.reason, r.image_digest
    FROM shell.commands r
    LEFT JOIN shell.commands o ON o.id = r.replay_of_command_id
    WHERE r.replay_run_id = p_run_id
    ORDER BY r.id;
END
$$;

-- A command's output chunks with when each arrived, in milliseconds after
-- the command started (0 for a chunk stored before the start was recorded).
CREATE FUNCTION shell_api.output_timeline(p_command_id bigint)
RETURNS TABLE (seq integer, offset_ms bigint, data text)
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    started timestamptz;
BEGIN
    PERFORM shell.current_user_id();
    SELECT c.started_at INTO started FROM shell.commands c WHERE c.id = p_command_id;
    IF NOT FOUND THEN
        PERFORM shell.command_not_found();
    END IF;
    RETURN QUERY
    SELECT o.seq,
           greatest(0, floor(extract(epoch FROM o.created_at - coalesce(started, o.created_at)) * 1000))::bigint,
           o.data
    FROM shell.output_chunks o
    WHERE o.command_id = p_command_id
    ORDER BY o.seq;
END
$$;

-- Pending commands of every tenant: the queue depth the executor and the
-- gateway export as a metric. Counted on the partial index of pending
-- commands, so it costs what the backlog is, not what the history is.
CREATE FUNCTION shell.queue_depth() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT count(*) FROM shell.commands c WHERE c.status = 'pending'
$$;

-- Where each usage consumer (a billing export, say) has read up to: every
-- command that completed before covered_until has been reported to it, and
-- none after. last_command_id is the last command its last report counted
-- (for people reading the table; reports go by covered_until).
CREATE TABLE shell.usage_watermarks (
    consumer        text PRIMARY KEY CHECK (consumer ~ '^[A-Za-z0-9_.:-]{1,100}$'),
    covered_until   timestamptz NOT NULL,
    last_command_id bigint,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE shell.usage_watermarks ENABLE ROW LEVEL SECURITY;

-- Per-user usage of the commands that ended since the consumer's watermark
-- (on its first report: since p_since), and the watermark moved past them,
-- in this one transaction: run again, a report holds only what ended after.
--
-- completed_at is the start time of the transaction that ended the command,
-- which commits a little later. So the report stops short of the oldest
-- transaction still open: a command it could not see yet ends no earlier
-- than that, and the next report counts it. (The owner of this function
-- must be able to read other roles' xact_start in pg_stat_activity: a
-- superuser or a member of pg_read_all_stats.)
CREATE FUNCTION shell.usage_report(p_consumer text DEFAULT 'default',
                                   p_since timestamptz DEFAULT now() - interval '1 day')
RETURNS TABLE (user_id uuid, username text, commands bigint, run_ms bigint, output_bytes bigint,
               from_time timestamptz, until_time timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    mark shell.usage_watermarks;
    lower_bound timestamptz;
    upper_bound timestamptz;
    last_id bigint;
BEGIN
    IF p_consumer IS NULL OR p_consumer !~ '^[A-Za-z0-9_.:-]{1,100}$' THEN
        RAISE EXCEPTION 'invalid consumer name %', coalesce(quote_literal(p_consumer), 'NULL')
            USING ERRCODE = '22023', HINT = 'Use 1-100 letters, digits, "_", ".", ":" or "-".';
    END IF;
    IF p_since IS NULL OR p_since > now() THEN
        RAISE EXCEPTION 'p_since must be a time in the past' USING ERRCODE = '22023';
    END IF;
    -- Locked, so two reports for one consumer take turns and never count a
    -- command twice.
    INSERT INTO shell.usage_watermarks AS w (consumer, covered_until) VALUES (p_consumer, p_since)
    ON CONFLICT (consumer) DO NOTHING;
    SELECT * INTO mark FROM shell.usage_watermarks w WHERE w.consumer = p_consumer FOR UPDATE;
    lower_bound := mark.covered_until;
    SELECT least(now(), min(a.xact_start)) INTO upper_bound
    FROM pg_catalog.pg_stat_activity a
    WHERE a.pid <> pg_catalog.pg_backend_pid() AND a.datname = pg_catalog.current_database()
      AND a.xact_start IS NOT NULL;
    upper_bound := greatest(lower_bound, upper_bound);
    -- Every terminal command is chained (0004_result_chain), so this range is read
    -- through commands_chained_completed.
    SELECT max(c.id) INTO last_id FROM shell.commands c
    WHERE c.chain_seq IS NOT NULL AND c.completed_at >= lower_bound AND c.completed_at < upper_bound
      AND c.status IN ('done', 'failed', 'cancelled');
    UPDATE shell.usage_watermarks w
    SET covered_until = upper_bound, last_command_id = coalesce(last_id, w.last_command_id), updated_at = now()
    WHERE w.consumer = p_consumer;
    RETURN QUERY
    SELECT c.user_id, u.username, count(*), coalesce(sum(c.duration_ms), 0)::bigint,
           coalesce(sum(c.output_bytes), 0)::bigint, lower_bound, upper_bound
    FROM shell.commands c JOIN shell.users u ON u.id = c.user_id
    WHERE c.chain_seq IS NOT NULL AND c.completed_at >= lower_bound AND c.completed_at < upper_bound
      AND c.status IN ('done', 'failed', 'cancelled')
    GROUP BY c.user_id, u.username
    ORDER BY u.username;
END
$$;
