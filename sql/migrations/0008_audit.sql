-- Reading the tamper-evident history (executor/audit.py verifies it; the
-- chain itself is kept by 0004_result_chain) and retention that keeps it
-- verifiable.

-- Reading history for `pg-shell audit` (verify, export): every terminal or
-- chained command, in chain order per session, with the row fields its
-- record is checked against (executor/records.py facts_of) and the hash of
-- its output chunks.
CREATE FUNCTION shell.audit_history(p_session_id uuid DEFAULT NULL)
RETURNS TABLE (session_id uuid, command_id bigint, chain_seq bigint, chain_prev text, chain_hash text,
               result_record text, signature text, key_id text, user_id uuid, command text,
               status text, exit_code integer, reason text, truncated boolean, output text,
               cwd_before text, env_before jsonb, cwd_after text, env_after jsonb, image_digest text,
               worker_id text, attempt integer, duration_ms integer, chunks_sha256 text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT c.session_id, c.id, c.chain_seq, c.chain_prev, c.chain_hash, c.result_record, c.signature,
           c.key_id, c.user_id, c.command, c.status, c.exit_code, c.reason, c.truncated, c.output,
           c.cwd_before, c.env_before, c.cwd_after, c.env_after, c.image_digest, c.worker_id,
           c.attempts, c.duration_ms,
           (SELECT shell.sha256_hex(string_agg(o.data, '' ORDER BY o.seq))
            FROM shell.output_chunks o WHERE o.command_id = c.id)
    FROM shell.commands c
    WHERE (p_session_id IS NULL OR c.session_id = p_session_id)
      AND (c.status IN ('done', 'failed', 'cancelled') OR c.chain_seq IS NOT NULL)
    ORDER BY c.session_id, c.chain_seq NULLS LAST, c.id
$$;

-- Each session's chain head and checkpoint (sessions with a chain only).
CREATE FUNCTION shell.audit_sessions(p_session_id uuid DEFAULT NULL)
RETURNS TABLE (session_id uuid, head_seq bigint, head_hash text, checkpoint_seq bigint,
               checkpoint_hash text, checkpoint_removed bigint, checkpoint_record text,
               checkpoint_signature text, checkpoint_key_id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT l.session_id, l.chain_seq, l.chain_head, k.chain_seq, k.chain_hash, k.removed, k.record,
           k.signature, k.key_id
    FROM shell.lanes l LEFT JOIN shell.chain_checkpoints k ON k.session_id = l.session_id
    WHERE (p_session_id IS NULL OR l.session_id = p_session_id) AND l.chain_seq > 0
    ORDER BY l.session_id
$$;

CREATE FUNCTION shell.audit_keys() RETURNS TABLE (key_id text, public_key text, worker_id text,
                                                  registered_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT k.key_id, k.public_key, k.worker_id, k.registered_at FROM shell.signing_keys k ORDER BY k.registered_at
$$;

-- Retention (`pg-shell cleanup`). It removes the oldest links of a chain,
-- in chain order, and leaves a checkpoint: the hash of the last removed
-- link, from which verification resumes. A command that a session was forked
-- from, or that a still-present replay command was replayed from, is kept
-- (with its record and link, checked on its own) rather than cutting the
-- reference: provenance outlives retention. It is removed by a later round
-- once nothing refers to it (replay commands age out themselves; a fork
-- pins its source for as long as the forked session exists).
CREATE INDEX commands_replay_of ON shell.commands (replay_of_command_id)
    WHERE replay_of_command_id IS NOT NULL;
CREATE INDEX sessions_forked_from ON shell.sessions (forked_from_command_id)
    WHERE forked_from_command_id IS NOT NULL;
CREATE INDEX commands_chained_completed ON shell.commands (completed_at)
    WHERE chain_seq IS NOT NULL;

CREATE FUNCTION shell.is_pinned(p_command_id bigint) RETURNS boolean
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT EXISTS (SELECT FROM shell.sessions s WHERE s.forked_from_command_id = p_command_id)
        OR EXISTS (SELECT FROM shell.commands r WHERE r.replay_of_command_id = p_command_id)
$$;

-- Sessions with chained commands that ended before p_before, after p_after
-- (a cursor over session ids).
CREATE FUNCTION shell.retention_sessions(p_before timestamptz, p_after uuid DEFAULT NULL,
                                         p_limit integer DEFAULT 100)
RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT c.session_id FROM shell.commands c
    WHERE c.chain_seq IS NOT NULL AND c.completed_at < p_before
      AND (p_after IS NULL OR c.session_id > p_after)
    GROUP BY c.session_id ORDER BY c.session_id LIMIT p_limit
$$;

-- What one retention batch of a session removes: up to p_limit unpinned
-- links, oldest first, from the prefix of the chain that ended before
-- p_before; and the checkpoint that results. Locks the session's lane until
-- the transaction ends (shell.apply_retention runs in the same one).
CREATE FUNCTION shell.retention_plan(p_session_id uuid, p_before timestamptz, p_limit integer)
RETURNS TABLE (command_ids bigint[], chain_seq bigint, chain_hash text, removed bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
#variable_conflict use_column
DECLARE
    head bigint;
    horizon bigint;
    cp shell.chain_checkpoints;
    last_seq bigint;
    last_hash text;
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 100000' USING ERRCODE = '22023';
    END IF;
    SELECT l.chain_seq INTO head FROM shell.lanes l WHERE l.session_id = p_session_id FOR UPDATE;
    -- Only a prefix of the chain: everything up to the first link that is
    -- still within the retention period.
    SELECT coalesce(min(c.chain_seq) - 1, head) INTO horizon FROM shell.commands c
    WHERE c.session_id = p_session_id AND c.chain_seq IS NOT NULL AND c.completed_at >= p_before;
    SELECT array_agg(t.id ORDER BY t.chain_seq), max(t.chain_seq), count(*)
    INTO command_ids, last_seq, removed
    FROM (SELECT c.id, c.chain_seq FROM shell.commands c
          WHERE c.session_id = p_session_id AND c.chain_seq <= horizon
            AND c.status IN ('done', 'failed', 'cancelled') AND NOT shell.is_pinned(c.id)
          ORDER BY c.chain_seq LIMIT p_limit) t;
    IF removed = 0 THEN
        RETURN;
    END IF;
    SELECT * INTO cp FROM shell.chain_checkpoints k WHERE k.session_id = p_session_id;
    SELECT c.chain_hash INTO last_hash FROM shell.commands c
    WHERE c.session_id = p_session_id AND c.chain_seq = last_seq;
    IF cp.chain_seq >= last_seq THEN
        chain_seq := cp.chain_seq;
        chain_hash := cp.chain_hash;
    ELSE
        chain_seq := last_seq;
        chain_hash := last_hash;
    END IF;
    removed := removed + coalesce(cp.removed, 0);
    RETURN NEXT;
END
$$;

-- Removes the planned links (and their output) and saves the checkpoint
-- with its record: {"session_id", "chain_seq", "chain_hash", "removed", …}
-- signed by the cleanup agent.
CREATE FUNCTION shell.apply_retention(p_session_id uuid, p_command_ids bigint[], p_chain_seq bigint,
                                      p_chain_hash text, p_removed bigint, p_record text,
                                      p_signature text, p_key_id text)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    claimed jsonb;
    gone integer;
BEGIN
    BEGIN
        claimed := p_record::jsonb;
    EXCEPTION WHEN others THEN
        RAISE EXCEPTION 'checkpoint record is not JSON' USING ERRCODE = '22023';
    END;
    IF claimed ->> 'session_id' IS DISTINCT FROM p_session_id::text
       OR claimed -> 'chain_seq' IS DISTINCT FROM to_jsonb(p_chain_seq)
       OR claimed ->> 'chain_hash' IS DISTINCT FROM p_chain_hash
       OR claimed -> 'removed' IS DISTINCT FROM to_jsonb(p_removed)
       OR claimed ->> 'signer' IS DISTINCT FROM p_key_id
       OR p_signature IS NULL OR p_signature !~ '^[0-9a-f]{128}$'
       OR NOT EXISTS (SELECT FROM shell.signing_keys k WHERE k.key_id = p_key_id) THEN
        RAISE EXCEPTION 'checkpoint record does not match, or is not signed by a registered key'
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT FROM shell.commands c WHERE c.id = ANY (p_command_ids)
               AND (c.session_id <> p_session_id OR c.chain_seq IS NULL OR c.chain_seq > p_chain_seq
                    OR c.status NOT IN ('done', 'failed', 'cancelled'))) THEN
        RAISE EXCEPTION 'only ended, chained commands of the session up to the checkpoint are removed'
            USING ERRCODE = '22023';
    END IF;
    DELETE FROM shell.output_chunks o WHERE o.command_id = ANY (p_command_ids);
    DELETE FROM shell.commands c WHERE c.id = ANY (p_command_ids);
    GET DIAGNOSTICS gone = ROW_COUNT;
    INSERT INTO shell.chain_checkpoints AS k (session_id, chain_seq, chain_hash, removed, record, signature, key_id)
    VALUES (p_session_id, p_chain_seq, p_chain_hash, p_removed, p_record, p_signature, p_key_id)
    ON CONFLICT (session_id) DO UPDATE SET chain_seq = EXCLUDED.chain_seq, chain_hash = EXCLUDED.chain_hash,
        removed = EXCLUDED.removed, record = EXCLUDED.record, signature = EXCLUDED.signature,
        key_id = EXCLUDED.key_id, created_at = now();
    RETURN gone;
END
$$;

-- Of these sessions, those idle since before p_idle_before: nothing queued
-- or running, no command submitted or ended since (their volumes may go).
CREATE FUNCTION shell.idle_sessions(p_session_ids uuid[], p_idle_before timestamptz)
RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT s.id FROM shell.sessions s JOIN shell.lanes l ON l.session_id = s.id
    WHERE s.id = ANY (p_session_ids) AND s.last_active_at < p_idle_before
      AND l.pending = 0 AND l.active_command_id IS NULL
$$;
