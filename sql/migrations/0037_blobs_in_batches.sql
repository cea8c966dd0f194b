-- A host that restores a session's files read each blob a chunk per call,
-- and one more call to learn it had no next chunk: a 5,000-file home took
-- over 10,000 round trips. Small blobs (one chunk each) are now read many
-- at a time.

CREATE FUNCTION shell.blob_chunks_of(p_sha256 text[]) RETURNS TABLE (sha256 text, seq integer, data bytea)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT k.sha256, k.seq, k.data FROM shell.blob_chunks k
    WHERE k.sha256 = ANY (p_sha256)
    ORDER BY k.sha256, k.seq
$$;

COMMENT ON FUNCTION shell.blob_chunks_of(text[]) IS 'Executor (restoring files): every chunk of these blobs, by blob and chunk; a blob not stored has no row. The caller bounds the bytes by the blobs it names.';
