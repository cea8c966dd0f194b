-- Interactive commands (DESIGN.md §13): a command may run on a terminal,
-- or with input given up front; what is typed into it is data, a row per
-- piece, committed before the executor delivers it.
--
-- 1. What a command's input is: none (stdin is /dev/null, as before),
--    open (a terminal: input may be sent until close_input or the end) or
--    closed (no more input: p_stdin was all of it, or close_input was called).
-- 2. Input rows, with the bytes of what was typed while the terminal had
--    echo off kept only until delivered, in an unlogged table (never in the
--    WAL, never in an export): the row keeps its length and SHA-256.
-- 3. The API: submit_command with a terminal or input, send_input,
--    close_input, resize_terminal, command_input.
-- 4. The executor's side: input to deliver, delivery reported (with the
--    terminal's echo at that moment), echo changes, input sealed at the end.
-- 5. Per-tenant limits of a terminal command: idle limit, maximum duration,
--    input calls a second.

-- 1. ---------------------------------------------------------------------------------

ALTER TABLE shell.commands
    ADD COLUMN tty boolean NOT NULL DEFAULT false,
    ADD COLUMN cols integer,
    ADD COLUMN rows integer,
    ADD COLUMN input text NOT NULL DEFAULT 'none' CHECK (input IN ('none', 'open', 'closed')),
    -- As the executor last saw the terminal: input sent meanwhile is stored redacted.
    ADD COLUMN echo_off boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT commands_window CHECK (NOT tty OR (cols BETWEEN 1 AND 1000 AND rows BETWEEN 1 AND 1000));

COMMENT ON COLUMN shell.commands.input IS
    'none: stdin is /dev/null; open: input may be sent (a terminal); closed: no more input will come.';

ALTER TABLE shell.users
    ADD COLUMN terminal_idle_s integer NOT NULL DEFAULT 900 CHECK (terminal_idle_s > 0),
    ADD COLUMN terminal_max_s integer NOT NULL DEFAULT 7200 CHECK (terminal_max_s > 0),
    ADD COLUMN max_inputs_per_second integer NOT NULL DEFAULT 100 CHECK (max_inputs_per_second > 0);

-- 2. ---------------------------------------------------------------------------------

CREATE TABLE shell.command_input (
    command_id bigint NOT NULL REFERENCES shell.commands (id),
    seq integer NOT NULL CHECK (seq >= 0),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- When the program receives it, counted from the command's start (a
    -- replay delivers it at the same offset); 0 for input sent before the start.
    offset_ms bigint NOT NULL CHECK (offset_ms >= 0),
    kind text NOT NULL CHECK (kind IN ('data', 'resize', 'eof')),
    data text,  -- NULL when redacted, and for resize and eof
    length integer NOT NULL DEFAULT 0,  -- bytes of data (UTF-8), redacted or not
    sha256 text,  -- of those bytes
    redacted boolean NOT NULL DEFAULT false,
    cols integer,
    rows integer,
    delivered_at timestamptz,
    PRIMARY KEY (command_id, seq),
    CHECK (kind <> 'data' OR (sha256 IS NOT NULL AND (redacted = (data IS NULL)))),
    CHECK (kind <> 'resize' OR (cols BETWEEN 1 AND 1000 AND rows BETWEEN 1 AND 1000))
);
COMMENT ON TABLE shell.command_input IS
    'What was typed into (or given to) a command, in order; redacted rows keep only length and SHA-256.';

ALTER TABLE shell.command_input ENABLE ROW LEVEL SECURITY;
CREATE POLICY command_input_owner ON shell.command_input FOR SELECT TO shell_user
    USING (EXISTS (SELECT FROM shell.commands c
                   WHERE c.id = command_id AND c.user_id = (SELECT shell.current_user_id())));

-- Unlogged: never written to the WAL, so neither a replica nor a base
-- backup ever holds a password; emptied by a crash, which ends the command anyway.
CREATE UNLOGGED TABLE shell.secret_input (
    command_id bigint NOT NULL,
    seq integer NOT NULL,
    data text NOT NULL,
    PRIMARY KEY (command_id, seq)
);
ALTER TABLE shell.secret_input ENABLE ROW LEVEL SECURITY;
COMMENT ON TABLE shell.secret_input IS
    'The bytes of redacted input until the executor delivered them; nobody but the functions reads it.';

-- 3. ---------------------------------------------------------------------------------

CREATE FUNCTION shell.check_window(p_cols integer, p_rows integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = '' AS $$
BEGIN
    IF p_cols IS NULL OR p_rows IS NULL OR p_cols NOT BETWEEN 1 AND 1000 OR p_rows NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'window size %x% is out of range', p_cols, p_rows USING ERRCODE = '22023',
            DETAIL = 'Columns and rows are each between 1 and 1000.';
    END IF;
END
$$;

-- Appends one input row for a command the caller owns, locked: a data row
-- is redacted when the terminal has echo off. Returns its sequence number.
CREATE FUNCTION shell.add_input(p_command shell.commands, p_kind text, p_data text DEFAULT NULL,
                                p_cols integer DEFAULT NULL, p_rows integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    next_seq integer;
    secret boolean := p_kind = 'data' AND p_command.echo_off;
BEGIN
    SELECT coalesce(max(i.seq) + 1, 0) INTO next_seq FROM shell.command_input i WHERE i.command_id = p_command.id;
    INSERT INTO shell.command_input (command_id, seq, offset_ms, kind, data, length, sha256, redacted, cols, rows)
    VALUES (p_command.id, next_seq,
            CASE WHEN p_command.started_at IS NULL THEN 0
                 ELSE greatest(0, floor(extract(epoch FROM clock_timestamp() - p_command.started_at) * 1000)) END,
            p_kind, CASE WHEN secret THEN NULL ELSE p_data END,
            coalesce(octet_length(p_data), 0),
            CASE WHEN p_kind = 'data' THEN encode(sha256(convert_to(p_data, 'UTF8')), 'hex') END,
            secret, p_cols, p_rows);
    IF secret THEN
        INSERT INTO shell.secret_input (command_id, seq, data) VALUES (p_command.id, next_seq, p_data);
    END IF;
    -- The payload names the command: only the executor running it acts.
    PERFORM pg_notify('shell_input', p_command.id::text);
    RETURN next_seq;
END
$$;

-- The caller's command, locked against other input (never the lane: the
-- executor's transitions lock lane then command, so no cycle), still
-- taking input of this kind, else PT409 saying why not.
CREATE FUNCTION shell.input_target(p_command_id bigint, p_terminal boolean DEFAULT false)
RETURNS shell.commands
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target shell.commands := shell.owned_command(p_command_id);
BEGIN
    SELECT * INTO target FROM shell.commands c WHERE c.id = p_command_id FOR NO KEY UPDATE;
    IF target.status NOT IN ('pending', 'claimed', 'running') THEN
        RAISE EXCEPTION 'command % has ended', p_command_id USING ERRCODE = 'PT409',
            HINT = 'Input reaches a command only while it is queued or running.';
    END IF;
    IF p_terminal AND NOT target.tty THEN
        RAISE EXCEPTION 'command % has no terminal', p_command_id USING ERRCODE = 'PT409',
            HINT = 'Submit it with p_tty => true to give it one.';
    END IF;
    IF target.input = 'none' THEN
        RAISE EXCEPTION 'command % takes no input', p_command_id USING ERRCODE = 'PT409',
            HINT = 'It runs without a terminal and its stdin is empty: submit it with p_tty => true '
                   'to type into it, or give its input up front with p_stdin.';
    END IF;
    IF target.input = 'closed' AND NOT p_terminal THEN
        RAISE EXCEPTION 'the input of command % is closed', p_command_id USING ERRCODE = 'PT409',
            HINT = 'Its end of input was sent; nothing more can be sent to it.';
    END IF;
    RETURN target;
END
$$;

DROP FUNCTION shell_api.submit_command(uuid, text);
CREATE FUNCTION shell_api.submit_command(p_session_id uuid, p_command text, p_tty boolean DEFAULT false,
                                         p_cols integer DEFAULT 80, p_rows integer DEFAULT 24,
                                         p_stdin text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    new_id bigint;
    cmd shell.commands;
BEGIN
    -- \x0b is the vertical tab: E'\v' is not an escape in PostgreSQL (it is "v").
    IF p_command IS NULL OR btrim(p_command, E' \t\r\n\f\x0b') = '' THEN
        RAISE EXCEPTION 'command is empty' USING ERRCODE = '22023', HINT = 'Type a command to run.';
    END IF;
    IF octet_length(p_command) > 1048576 THEN
        RAISE EXCEPTION 'command is too large (% bytes)', octet_length(p_command)
            USING ERRCODE = 'PT413', DETAIL = 'A command may be at most 1048576 bytes.',
                  HINT = 'Put long scripts in a file in the session and run the file.';
    END IF;
    IF p_tty IS NULL THEN
        RAISE EXCEPTION 'p_tty must be true or false' USING ERRCODE = '22023';
    END IF;
    IF p_tty THEN
        PERFORM shell.check_window(p_cols, p_rows);
    END IF;
    IF octet_length(p_stdin) > 1048576 THEN
        RAISE EXCEPTION 'input is too large (% bytes)', octet_length(p_stdin) USING ERRCODE = '22023',
            DETAIL = 'Input given with the command may be at most 1048576 bytes.',
            HINT = 'Upload larger input as a file and redirect it: cmd < file.';
    END IF;
    new_id := shell.enqueue(shell.owned_session(p_session_id), p_command);
    IF NOT p_tty AND p_stdin IS NULL THEN
        RETURN new_id;
    END IF;
    UPDATE shell.commands c SET tty = p_tty,
        cols = CASE WHEN p_tty THEN p_cols END, rows = CASE WHEN p_tty THEN p_rows END,
        input = CASE WHEN p_tty THEN 'open' ELSE 'closed' END
    WHERE c.id = new_id RETURNING * INTO cmd;
    IF p_stdin <> '' THEN
        PERFORM shell.add_input(cmd, 'data', p_stdin);
    END IF;
    IF NOT p_tty THEN
        PERFORM shell.add_input(cmd, 'eof');
    END IF;
    RETURN new_id;
END
$$;
COMMENT ON FUNCTION shell_api.submit_command(uuid, text, boolean, integer, integer, text) IS
    'Queues a command in a session; with p_tty it runs on a terminal of p_cols x p_rows that takes '
    'input until it ends, with p_stdin that text is all of its stdin. Returns the command''s id.';

CREATE FUNCTION shell_api.send_input(p_command_id bigint, p_data text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target shell.commands;
    per_second integer;
BEGIN
    IF p_data IS NULL OR p_data = '' THEN
        RAISE EXCEPTION 'input is empty' USING ERRCODE = '22023', HINT = 'Send at least one character.';
    END IF;
    IF octet_length(p_data) > 65536 THEN
        RAISE EXCEPTION 'input is too large (% bytes)', octet_length(p_data) USING ERRCODE = '22023',
            DETAIL = 'One call may send at most 65536 bytes.', HINT = 'Send it in parts, in order.';
    END IF;
    target := shell.input_target(p_command_id);
    IF target.input = 'closed' THEN  -- a terminal whose end of input was sent
        RAISE EXCEPTION 'the input of command % is closed', p_command_id USING ERRCODE = 'PT409',
            HINT = 'Its end of input was sent; nothing more can be sent to it.';
    END IF;
    SELECT u.max_inputs_per_second INTO per_second FROM shell.users u WHERE u.id = target.user_id;
    IF (SELECT count(*) FROM shell.command_input i
        WHERE i.command_id = p_command_id AND i.created_at > clock_timestamp() - interval '1 second') >= per_second THEN
        RAISE EXCEPTION 'input rate limit reached (% calls a second)', per_second USING ERRCODE = 'PT429',
            HINT = 'Try again in 1 seconds; send larger pieces less often.';
    END IF;
    RETURN shell.add_input(target, 'data', p_data);
END
$$;
COMMENT ON FUNCTION shell_api.send_input(bigint, text) IS
    'Appends input (at most 64 KiB) to a queued or running command with a terminal or open stdin; '
    'returns its sequence number. Typed while the terminal has echo off, only its length and hash are kept.';

CREATE FUNCTION shell_api.close_input(p_command_id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target shell.commands := shell.input_target(p_command_id, false);
BEGIN
    UPDATE shell.commands c SET input = 'closed' WHERE c.id = p_command_id;
    PERFORM shell.add_input(target, 'eof');
    RETURN true;
END
$$;
COMMENT ON FUNCTION shell_api.close_input(bigint) IS
    'End of input: the program reads end-of-file (on a terminal, the end-of-file character). No input after it.';

CREATE FUNCTION shell_api.resize_terminal(p_command_id bigint, p_cols integer, p_rows integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target shell.commands;
BEGIN
    PERFORM shell.check_window(p_cols, p_rows);
    -- commands.cols and rows stay the size it started with: a replay
    -- starts there and receives the resizes at their offsets.
    target := shell.input_target(p_command_id, true);
    PERFORM shell.add_input(target, 'resize', NULL, p_cols, p_rows);
END
$$;
COMMENT ON FUNCTION shell_api.resize_terminal(bigint, integer, integer) IS
    'Sets the window size of a terminal command (1-1000 columns and rows); the program gets SIGWINCH.';

CREATE FUNCTION shell_api.command_input(p_command_id bigint)
RETURNS TABLE (seq integer, offset_ms bigint, data text, redacted boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT i.seq, i.offset_ms, i.data, i.redacted
    FROM shell.command_input i
    WHERE i.command_id = (shell.owned_command(p_command_id)).id AND i.kind = 'data'
    ORDER BY i.seq
$$;
COMMENT ON FUNCTION shell_api.command_input(bigint) IS
    'What was typed into a command, in order, with when (ms from its start); redacted parts have no data.';

-- 4. ---------------------------------------------------------------------------------

-- The command as its executor holds it (no lane change: nothing a page shows moves).
CREATE FUNCTION shell.held_command(p_command_id bigint, p_worker_id text, p_attempt integer)
RETURNS shell.commands
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    held shell.commands;
BEGIN
    SELECT * INTO held FROM shell.commands c WHERE c.id = p_command_id;
    IF held.id IS NULL OR held.worker_id IS DISTINCT FROM p_worker_id
       OR held.attempts IS DISTINCT FROM p_attempt OR held.status NOT IN ('claimed', 'running') THEN
        PERFORM shell.lease_lost(p_command_id, p_worker_id, p_attempt, held);
    END IF;
    RETURN held;
END
$$;

-- What a terminal or stdin command runs with; NULL for a command without input.
CREATE FUNCTION shell.command_terminal(p_command_id bigint, p_worker_id text, p_attempt integer)
RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT CASE WHEN c.input = 'none' THEN NULL ELSE jsonb_build_object(
        'tty', c.tty, 'cols', c.cols, 'rows', c.rows,
        'idle_s', u.terminal_idle_s, 'max_s', u.terminal_max_s) END
    FROM shell.commands c JOIN shell.users u ON u.id = c.user_id
    WHERE c.id = (shell.held_command(p_command_id, p_worker_id, p_attempt)).id
$$;

-- Input after p_after_seq, with the bytes of redacted rows (the executor
-- delivers them, then reports it: shell.input_delivered).
CREATE FUNCTION shell.pending_input(p_command_id bigint, p_worker_id text, p_attempt integer, p_after_seq integer)
RETURNS TABLE (seq integer, offset_ms bigint, kind text, data text, cols integer, rows integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT i.seq, i.offset_ms, i.kind, coalesce(i.data, s.data), i.cols, i.rows
    FROM shell.command_input i
    LEFT JOIN shell.secret_input s ON s.command_id = i.command_id AND s.seq = i.seq
    WHERE i.command_id = (shell.held_command(p_command_id, p_worker_id, p_attempt)).id
      AND i.seq > p_after_seq
    ORDER BY i.seq
    LIMIT 256
$$;

-- Input up to p_upto_seq reached the program; p_hidden: the sequence
-- numbers delivered while the terminal had echo off, whose bytes are then
-- dropped (input sent before the echo change was recorded).
CREATE FUNCTION shell.input_delivered(p_command_id bigint, p_worker_id text, p_attempt integer,
                                      p_upto_seq integer, p_hidden integer[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    PERFORM shell.held_command(p_command_id, p_worker_id, p_attempt);
    UPDATE shell.command_input i SET data = NULL, redacted = true
    WHERE i.command_id = p_command_id AND i.seq = ANY (p_hidden) AND i.kind = 'data' AND NOT i.redacted;
    UPDATE shell.command_input i SET delivered_at = clock_timestamp()
    WHERE i.command_id = p_command_id AND i.seq <= p_upto_seq AND i.delivered_at IS NULL;
    DELETE FROM shell.secret_input s WHERE s.command_id = p_command_id AND s.seq <= p_upto_seq;
END
$$;

-- The terminal's echo as the program left it: input sent while it is off is stored redacted.
CREATE FUNCTION shell.terminal_echo(p_command_id bigint, p_worker_id text, p_attempt integer, p_echo boolean)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    PERFORM shell.held_command(p_command_id, p_worker_id, p_attempt);
    UPDATE shell.commands c SET echo_off = NOT p_echo WHERE c.id = p_command_id;
END
$$;

-- The program is over: no input is taken after this, and what was taken is
-- returned for the result record's input hash (redacted rows by their hash).
CREATE FUNCTION shell.seal_input(p_command_id bigint, p_worker_id text, p_attempt integer)
RETURNS TABLE (seq integer, offset_ms bigint, kind text, sha256 text, cols integer, rows integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    PERFORM shell.held_command(p_command_id, p_worker_id, p_attempt);
    -- Under the row lock send_input takes: nothing is added after the list below.
    UPDATE shell.commands c SET input = 'closed', echo_off = false WHERE c.id = p_command_id AND c.input <> 'none';
    DELETE FROM shell.secret_input s WHERE s.command_id = p_command_id;
    RETURN QUERY SELECT i.seq, i.offset_ms, i.kind, i.sha256, i.cols, i.rows
    FROM shell.command_input i WHERE i.command_id = p_command_id ORDER BY i.seq;
END
$$;

-- A replayed command with input gets the recorded input at the recorded
-- offsets. Input typed with echo off was never stored, so a replay that
-- would need it is refused, naming the command.
CREATE OR REPLACE FUNCTION shell_api.replay_session(p_session_id uuid, p_start_id bigint) RETURNS uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    source shell.sessions := shell.owned_session(p_session_id);
    start shell.commands;
    run_id uuid;
    run_session shell.sessions;
    original shell.commands;
    secret bigint;
    new_id bigint;
BEGIN
    SELECT * INTO start FROM shell.commands c
    WHERE c.id = p_start_id AND c.session_id = source.id AND c.replay_of_command_id IS NULL;
    IF start.id IS NULL THEN
        RAISE EXCEPTION 'command % is not an original command of this session', p_start_id
            USING ERRCODE = '22023', HINT = 'Pass the id of a command submitted to this session.';
    END IF;
    SELECT i.command_id INTO secret FROM shell.commands c JOIN shell.command_input i ON i.command_id = c.id
    WHERE c.session_id = source.id AND c.id >= p_start_id AND c.replay_of_command_id IS NULL AND i.redacted
    ORDER BY i.command_id LIMIT 1;
    IF secret IS NOT NULL THEN
        RAISE EXCEPTION 'command % was given input with echo off (a password), which is never stored', secret
            USING ERRCODE = 'PT409', HINT = 'Replay from a command after it.';
    END IF;
    -- Created first, then read: a volatile call in the WHERE clause would run
    -- once per existing session, and its own row is not visible to that query.
    run_id := shell.new_session(  -- the name is cut to stay within 200 characters
        source.user_id, 'replay of ' || left(coalesce(source.name, source.id::text), 150) || ' from ' || start.id,
        coalesce(start.cwd_before, '/home/sandbox'), coalesce(start.env_before, '{}'::jsonb),
        p_replay_of => source.id);
    -- A start command that never ran has no root_before: the files it would
    -- have started from are the root of the last command before it that has one.
    UPDATE shell.sessions s SET root = coalesce(start.root_before,
        (SELECT coalesce(c.root_after, c.root_before) FROM shell.commands c
         WHERE c.session_id = source.id AND c.id < start.id AND coalesce(c.root_after, c.root_before) IS NOT NULL
         ORDER BY c.id DESC LIMIT 1),
        shell.empty_tree())
    WHERE s.id = run_id;
    SELECT * INTO run_session FROM shell.sessions s WHERE s.id = run_id;
    FOR original IN
        SELECT * FROM shell.commands c
        WHERE c.session_id = source.id AND c.id >= p_start_id AND c.replay_of_command_id IS NULL
        ORDER BY c.id
    LOOP
        new_id := shell.enqueue(run_session, original.command, run_session.id, original.id,
                                original.image_digest, original.upload);
        CONTINUE WHEN original.input = 'none';
        INSERT INTO shell.command_input (command_id, seq, offset_ms, kind, data, length, sha256, cols, rows)
        SELECT new_id, i.seq, i.offset_ms, i.kind, i.data, i.length, i.sha256, i.cols, i.rows
        FROM shell.command_input i WHERE i.command_id = original.id;
        UPDATE shell.commands c SET tty = original.tty, cols = original.cols, rows = original.rows,
            input = CASE WHEN original.tty AND NOT EXISTS (SELECT FROM shell.command_input i
                              WHERE i.command_id = new_id AND i.kind = 'eof') THEN 'open' ELSE 'closed' END
        WHERE c.id = new_id;
    END LOOP;
    RETURN run_session.id;
END
$$;

-- 5. ---------------------------------------------------------------------------------

DROP FUNCTION shell.set_user_quota(text, integer, integer, integer, integer, integer, integer, integer, integer);
CREATE FUNCTION shell.set_user_quota(
    p_username text,
    p_max_sessions integer DEFAULT NULL,
    p_max_running integer DEFAULT NULL,
    p_max_queued integer DEFAULT NULL,
    p_max_output_mb integer DEFAULT NULL,
    p_max_files_mb integer DEFAULT NULL,
    p_max_tree_entries integer DEFAULT NULL,
    p_max_root_entries integer DEFAULT NULL,
    p_max_uploads_per_minute integer DEFAULT NULL,
    p_terminal_idle_s integer DEFAULT NULL,
    p_terminal_max_s integer DEFAULT NULL,
    p_max_inputs_per_second integer DEFAULT NULL
) RETURNS TABLE (username text, max_sessions integer, max_running integer, max_queued integer,
                 max_output_mb bigint, max_files_mb bigint, max_tree_entries integer,
                 max_root_entries integer, max_uploads_per_minute integer,
                 terminal_idle_s integer, terminal_max_s integer, max_inputs_per_second integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    IF least(p_max_sessions, p_max_running, p_max_queued, p_max_output_mb, p_max_files_mb,
             p_max_tree_entries, p_max_root_entries, p_max_uploads_per_minute) < 0 THEN
        RAISE EXCEPTION 'quotas cannot be negative' USING ERRCODE = '22023';
    END IF;
    IF least(p_terminal_idle_s, p_terminal_max_s, p_max_inputs_per_second) < 1 THEN
        RAISE EXCEPTION 'terminal limits must be at least 1' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    UPDATE shell.users u SET
        max_sessions = coalesce(p_max_sessions, u.max_sessions),
        max_running = coalesce(p_max_running, u.max_running),
        max_queued = coalesce(p_max_queued, u.max_queued),
        max_output_bytes = coalesce(p_max_output_mb::bigint * 1048576, u.max_output_bytes),
        max_file_bytes = coalesce(p_max_files_mb::bigint * 1048576, u.max_file_bytes),
        max_tree_entries = coalesce(p_max_tree_entries, u.max_tree_entries),
        max_root_entries = coalesce(p_max_root_entries, u.max_root_entries),
        max_uploads_per_minute = coalesce(p_max_uploads_per_minute, u.max_uploads_per_minute),
        terminal_idle_s = coalesce(p_terminal_idle_s, u.terminal_idle_s),
        terminal_max_s = coalesce(p_terminal_max_s, u.terminal_max_s),
        max_inputs_per_second = coalesce(p_max_inputs_per_second, u.max_inputs_per_second)
    WHERE u.username = p_username
    RETURNING u.username, u.max_sessions, u.max_running, u.max_queued, u.max_output_bytes / 1048576,
              u.max_file_bytes / 1048576, u.max_tree_entries, u.max_root_entries, u.max_uploads_per_minute,
              u.terminal_idle_s, u.terminal_max_s, u.max_inputs_per_second;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no user %', p_username USING ERRCODE = '22023';
    END IF;
END
$$;
