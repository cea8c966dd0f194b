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
