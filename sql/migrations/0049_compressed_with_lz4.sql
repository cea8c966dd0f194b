-- Files and output are compressed with lz4 where the server has it.
--
-- pglz took 39 ms to store a megabyte of text that lz4 stores in 8, and
-- kept it larger (1.09 MB on disk against 0.69): on the path of every
-- command that writes a file (blob chunks), or prints more than a page
-- (output chunks of up to 64 KiB). Values stored before stay as they are
-- (each says how it was compressed); a server built without lz4 keeps pglz.

DO $$
BEGIN
    ALTER TABLE shell.blob_chunks ALTER COLUMN data SET COMPRESSION lz4;
    ALTER TABLE shell.output_chunks ALTER COLUMN data SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this PostgreSQL has no lz4: files and output stay compressed with pglz';
END
$$;
