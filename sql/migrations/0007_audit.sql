-- Tamper-evident history (executor/audit.py verifies it).
--
-- Every command that becomes terminal gets a canonical result record (JSON
-- text, stored verbatim) and a link in its session's hash chain:
--   chain_hash = hex(sha256(chain_prev || result_record)),
-- numbered 1, 2, … in the order the session's commands became terminal. The
-- chain head lives on the session's lane row, and every terminal transition
-- holds that row's lock, so links are appended one at a time.
--
-- Records the executor produces carry its Ed25519 signature (key_id names
-- a key in shell.signing_keys; the private key never reaches the database).
-- Records of transitions the database makes itself (lease expiry, settle,
-- cancel of a pending command) are built here, unsigned, signer "database".

CREATE TABLE shell.signing_keys (
    key_id        text PRIMARY KEY CHECK (key_id ~ '^[0-9a-f]{16}$'),
    public_key    text NOT NULL UNIQUE CHECK (public_key ~ '^[0-9a-f]{64}$'),
    worker_id     text,
    registered_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE shell.signing_keys ENABLE ROW LEVEL SECURITY;

ALTER TABLE shell.lanes
    ADD COLUMN chain_seq  bigint NOT NULL DEFAULT 0,
    ADD COLUMN chain_head text NOT NULL DEFAULT repeat('0', 64);

ALTER TABLE shell.commands
    ADD COLUMN result_record text,
    ADD COLUMN signature     text,
    ADD COLUMN key_id        text,
    ADD COLUMN chain_seq     bigint,
    ADD COLUMN chain_prev    text,
    ADD COLUMN chain_hash    text;
-- Verification and retention walk a session's chain in order.
CREATE UNIQUE INDEX commands_session_chain ON shell.commands (session_id, chain_seq)
    WHERE chain_seq IS NOT NULL;

-- Where a session's chain resumes after retention removed its oldest links:
-- the hash of the last removed link, and how many links were removed in all
-- (links below chain_seq that are still present were kept on purpose: see
-- shell.retention_plan). Signed by the cleanup agent like a result record.
CREATE TABLE shell.chain_checkpoints (
    session_id uuid PRIMARY KEY REFERENCES shell.sessions (id),
    chain_seq  bigint NOT NULL CHECK (chain_seq > 0),
    chain_hash text NOT NULL,
    removed    bigint NOT NULL CHECK (removed > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    record     text NOT NULL,
    signature  text,
    key_id     text
);
ALTER TABLE shell.chain_checkpoints ENABLE ROW LEVEL SECURITY;

CREATE FUNCTION shell.sha256_hex(t text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT SET search_path = '' AS $$
    SELECT encode(sha256(convert_to(t, 'UTF8')), 'hex')
$$;

CREATE FUNCTION shell.utc_text(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = '' AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

-- The facts of a terminal command a result record vouches for. Keep in step
-- with executor/records.py (FACT_FIELDS, facts_of).
CREATE FUNCTION shell.result_facts(c shell.commands) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT jsonb_build_object(
        'command_id', c.id, 'session_id', c.session_id::text, 'user_id', c.user_id::text,
        'command_sha256', shell.sha256_hex(c.command), 'status', c.status,
        'exit_code', c.exit_code, 'reason', c.reason, 'truncated', c.truncated,
        'output_sha256', shell.sha256_hex(coalesce(c.output, '')),
        'cwd_before', c.cwd_before, 'env_before', c.env_before,
        'cwd_after', c.cwd_after, 'env_after', c.env_after,
        'image_digest', c.image_digest, 'worker_id', c.worker_id, 'attempt', c.attempts,
        'duration_ms', c.duration_ms)
$$;

-- Appends the (already terminal) command to its session's chain, with the
-- executor's signed record, or a record built here when there is none. The
-- caller holds the session's lane row lock.
CREATE FUNCTION shell.chain_result(p_command_id bigint, p_record text DEFAULT NULL,
                                   p_signature text DEFAULT NULL, p_key_id text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SET search_path = '' AS $$
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
    facts := shell.result_facts(c);
    IF rec IS NULL THEN
        rec := (facts || jsonb_build_object(
            'v', 1, 'signer', 'database', 'started_at', shell.utc_text(c.started_at),
            'finished_at', shell.utc_text(c.completed_at)))::text;
    ELSE
        BEGIN
            claimed := rec::jsonb;
        EXCEPTION WHEN others THEN
            RAISE EXCEPTION 'result record is not JSON' USING ERRCODE = '22023';
        END;
        IF jsonb_typeof(claimed) <> 'object' THEN
            RAISE EXCEPTION 'result record is not a JSON object' USING ERRCODE = '22023';
        END IF;
        FOR field IN SELECT jsonb_object_keys(facts) LOOP
            IF claimed -> field IS DISTINCT FROM facts -> field THEN
                RAISE EXCEPTION 'result record disagrees with the command on %', field
                    USING ERRCODE = '22023',
                    DETAIL = format('record says %s, the command has %s',
                                    coalesce((claimed -> field)::text, 'nothing'), (facts -> field)::text);
            END IF;
        END LOOP;
        IF p_signature IS NULL OR p_signature !~ '^[0-9a-f]{128}$'
           OR claimed ->> 'signer' IS DISTINCT FROM p_key_id
           OR NOT EXISTS (SELECT FROM shell.signing_keys k WHERE k.key_id = p_key_id) THEN
            RAISE EXCEPTION 'result record is not signed by a registered key' USING ERRCODE = '22023',
                HINT = 'Register the key with shell.register_signing_key first.';
        END IF;
    END IF;
    SELECT l.chain_head INTO prev FROM shell.lanes l WHERE l.session_id = c.session_id;
    UPDATE shell.lanes l SET chain_seq = l.chain_seq + 1, chain_head = shell.sha256_hex(prev || rec)
    WHERE l.session_id = c.session_id RETURNING l.chain_seq INTO seq;
    UPDATE shell.commands SET result_record = rec, signature = p_signature,
        key_id = CASE WHEN p_record IS NULL THEN NULL ELSE p_key_id END,
        chain_seq = seq, chain_prev = prev, chain_hash = shell.sha256_hex(prev || rec)
    WHERE id = p_command_id;
END
$$;

-- An executor announces the public half of its signing key at start-up.
-- Idempotent; returns the key id (first 16 hex digits of sha256 of the raw key).
CREATE FUNCTION shell.register_signing_key(p_public_key text, p_worker_id text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    new_id text;
BEGIN
    IF p_public_key IS NULL OR p_public_key !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'a public key is 32 bytes as 64 lowercase hex digits' USING ERRCODE = '22023';
    END IF;
    new_id := left(encode(sha256(decode(p_public_key, 'hex')), 'hex'), 16);
    INSERT INTO shell.signing_keys (key_id, public_key, worker_id) VALUES (new_id, p_public_key, p_worker_id)
    ON CONFLICT (key_id) DO NOTHING;
    RETURN new_id;
END
$$;

DROP FUNCTION shell.complete_command(bigint, text, integer, text, integer, text, boolean, text, jsonb, integer);

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
CREATE OR REPLACE FUNCTION shell.release_command(p_command shell.commands, p_container_started boolean,
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

-- A pending command is cancelled at once; a claimed or running one is
-- flagged and its executor kills it. Returns false if it had already ended.
CREATE OR REPLACE FUNCTION shell_api.cancel_command(p_command_id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target shell.commands := shell.owned_command(p_command_id);
    seq bigint;
BEGIN
    -- Lane first, then command: the lock order every transition follows.
    UPDATE shell.lanes l SET change_seq = l.change_seq + 1
    WHERE l.session_id = target.session_id RETURNING l.change_seq INTO seq;
    SELECT * INTO target FROM shell.commands c WHERE c.id = p_command_id FOR UPDATE;
    IF target.status = 'pending' THEN
        UPDATE shell.commands c SET status = 'cancelled', reason = 'cancelled', completed_at = now(),
            output = '', change_seq = seq
        WHERE c.id = p_command_id;
        PERFORM shell.chain_result(p_command_id);
        UPDATE shell.lanes l SET pending = l.pending - 1 WHERE l.session_id = target.session_id;
        RETURN true;
    ELSIF target.status IN ('claimed', 'running') THEN
        UPDATE shell.commands c SET cancel_requested_at = coalesce(c.cancel_requested_at, now()),
            change_seq = seq
        WHERE c.id = p_command_id;
        PERFORM pg_notify('shell_cancel', p_command_id::text);
        RETURN true;
    END IF;
    RETURN false;
END
$$;

-- History that ended before this migration joins the chain now, in the
-- order it ended, with records built here.
DO $$
DECLARE
    ended record;
BEGIN
    FOR ended IN
        SELECT c.id FROM shell.commands c
        WHERE c.status IN ('done', 'failed', 'cancelled') ORDER BY c.session_id, c.completed_at, c.id
    LOOP
        PERFORM shell.chain_result(ended.id);
    END LOOP;
END
$$;

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
