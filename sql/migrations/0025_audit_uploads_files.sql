-- The audit covers uploads and the files themselves (`pg-shell audit verify`):
--   1. result records, version 4: the facts hold the command's upload
--      ({"path", "sha256", "size", "mode"}, null for a command), so an
--      upload's record, which the database makes and vouches for (no
--      executor ran it, so none signs it), states what was put where, and
--      the root it left (root_after) is checked against the root before it
--      with that file put in;
--   2. the audit view carries the upload, and administrators read trees
--      and blobs to recompute every hash below a recorded root
--      (`pg-shell audit verify --files`): a root is a fact of a record, and
--      its trees and blobs are what it stands for.

-- 1. Records vouch for uploads ---------------------------------------------------

-- The facts of a terminal command a result record vouches for. Keep in step
-- with executor/audit/records.py (FACT_FIELDS, facts_of).
CREATE OR REPLACE FUNCTION shell.result_facts(c shell.commands) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT jsonb_build_object(
        'command_id', c.id, 'session_id', c.session_id::text, 'user_id', c.user_id::text,
        'command_sha256', shell.sha256_hex(c.command), 'status', c.status,
        'exit_code', c.exit_code, 'reason', c.reason, 'truncated', c.truncated,
        'output_sha256', shell.sha256_hex(shell.output_of(c)),
        'cwd_before', c.cwd_before, 'env_before', c.env_before,
        'cwd_after', c.cwd_after, 'env_after', c.env_after,
        'image_digest', c.image_digest, 'worker_id', c.worker_id, 'attempt', c.attempts,
        'duration_ms', c.duration_ms, 'root_before', c.root_before, 'root_after', c.root_after,
        'upload', c.upload)
$$;

-- Appends the (already terminal) command to its session's chain, with the
-- executor's signed record, or a record built here when there is none. The
-- caller holds the session's lane row lock.
--
-- As before (sql/migrations/0017_limits_quotas_audit.sql), plus: the
-- database's own records are version 4 and state the upload they apply; a
-- signed record of version 4 or later must state it too (null: the command
-- was no upload). Signed records of earlier versions (an executor not yet
-- upgraded) are checked without it; from version 3 on a signed record must
-- name the position it is appended at (read with shell.chain_position in the
-- completing transaction).
CREATE OR REPLACE FUNCTION shell.chain_result(p_command_id bigint, p_record text DEFAULT NULL,
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
    SELECT l.chain_seq + 1, l.chain_head INTO seq, prev FROM shell.lanes l
    WHERE l.session_id = c.session_id FOR UPDATE;
    facts := shell.result_facts(c);
    IF rec IS NULL THEN
        rec := (facts || jsonb_build_object(
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
$$;

-- 2. What the audit reads ---------------------------------------------------------

-- The audit view's rows, plus the upload an entry applied (null for a
-- command). The output is the stored one (chunks); chunks_sha256 stays for
-- exports made before.
DROP FUNCTION shell.audit_history(uuid);
CREATE FUNCTION shell.audit_history(p_session_id uuid DEFAULT NULL)
RETURNS TABLE (session_id uuid, command_id bigint, chain_seq bigint, chain_prev text, chain_hash text,
               result_record text, signature text, key_id text, user_id uuid, command text,
               status text, exit_code integer, reason text, truncated boolean, output text,
               cwd_before text, env_before jsonb, cwd_after text, env_after jsonb, image_digest text,
               worker_id text, attempt integer, duration_ms integer, chunks_sha256 text,
               root_before text, root_after text, upload jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT c.session_id, c.id, c.chain_seq, c.chain_prev, c.chain_hash, c.result_record, c.signature,
           c.key_id, c.user_id, c.command, c.status, c.exit_code, c.reason, c.truncated,
           shell.output_of(c), c.cwd_before, c.env_before, c.cwd_after, c.env_after, c.image_digest,
           c.worker_id, c.attempts, c.duration_ms, NULL::text, c.root_before, c.root_after, c.upload
    FROM shell.commands c
    WHERE (p_session_id IS NULL OR c.session_id = p_session_id)
      AND (c.status IN ('done', 'failed', 'cancelled') OR c.chain_seq IS NOT NULL)
    ORDER BY c.session_id, c.chain_seq NULLS LAST, c.id
$$;

-- Trees as stored, for recomputing their hashes: one row per stored tree of
-- p_hashes (a tree that is not stored has none), with its recorded size and
-- its entries as a JSON array of objects with the keys of shell.tree_hash.
CREATE FUNCTION shell.audit_trees(p_hashes text[])
RETURNS TABLE (hash text, size bigint, entries jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT t.hash, t.size,
           coalesce((SELECT jsonb_agg(jsonb_build_object('name', e.name, 'kind', e.kind, 'mode', e.mode,
                                                         'size', e.size, 'object', e.object,
                                                         'target', e.target))
                     FROM shell.tree_entries e WHERE e.tree = t.hash), '[]'::jsonb)
    FROM shell.trees t WHERE t.hash = ANY (p_hashes)
$$;

-- Blobs as stored, for recomputing their hashes: the recorded size and
-- number of chunks, and the chunk numbers present (read each with
-- shell.blob_chunk). A blob that is not stored has no row.
CREATE FUNCTION shell.audit_blobs(p_sha256 text[])
RETURNS TABLE (sha256 text, size bigint, chunks integer, seqs integer[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT b.sha256, b.size, b.chunks,
           coalesce((SELECT array_agg(k.seq ORDER BY k.seq) FROM shell.blob_chunks k
                     WHERE k.sha256 = b.sha256), '{}')
    FROM shell.blobs b WHERE b.sha256 = ANY (p_sha256)
$$;
