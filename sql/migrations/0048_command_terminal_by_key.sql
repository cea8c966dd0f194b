-- What a command runs with is read by its key, once.
--
-- command_terminal compared every command's id with the held command's
-- (WHERE c.id = (shell.held_command(...)).id): held_command is volatile, so
-- it was called again for each row and shell.commands was read whole, at
-- the start of every command (4 ms with 500 commands in the database, and
-- growing with each one). The held command is now the one row it is.

CREATE OR REPLACE FUNCTION shell.command_terminal(p_command_id bigint, p_worker_id text,
                                                  p_attempt integer) RETURNS jsonb
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = '' AS $$
    SELECT CASE WHEN c.input = 'none' THEN NULL ELSE jsonb_build_object(
        'tty', c.tty, 'cols', c.cols, 'rows', c.rows,
        'idle_s', u.terminal_idle_s, 'max_s', u.terminal_max_s) END
    FROM shell.held_command(p_command_id, p_worker_id, p_attempt) c
    JOIN shell.users u ON u.id = c.user_id
$$;
