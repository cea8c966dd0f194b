-- "Try again in 1 second.", not "1 seconds": the hints of the three
-- functions that answer PT429. Clients read the number either way (the
-- CLI, the page and the gateway's Retry-After match "second" or "seconds").

CREATE OR REPLACE FUNCTION shell.request_slot() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO ''
    AS $$
DECLARE
    claims jsonb;
    slots integer := (SELECT value::integer FROM shell.config WHERE key = 'request_slots_per_user');
    slot_key integer;
BEGIN
    BEGIN
        claims := nullif(current_setting('request.jwt.claims', true), '')::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        RETURN;
    END;
    IF claims ->> 'sub' IS NULL THEN
        RETURN;
    END IF;
    slot_key := hashtext('shell.request_slot:' || (claims ->> 'sub'));
    FOR i IN 0 .. slots - 1 LOOP
        IF pg_try_advisory_xact_lock(slot_key, i) THEN
            RETURN;
        END IF;
    END LOOP;
    -- PostgREST's raise with a status and headers of the function's choice.
    RAISE SQLSTATE 'PGRST' USING
        MESSAGE = json_build_object('code', 'PT429', 'message',
                                    format('too many requests of this user at once (at most %s)', slots),
                                    'details', NULL, 'hint', 'Try again in 1 second.')::text,
        DETAIL = '{"status": 429, "headers": {"Retry-After": "1"}}';
END
$$;

CREATE OR REPLACE FUNCTION shell.respond(p_status integer, p_code text, p_message text, p_retry_after integer DEFAULT NULL::integer) RETURNS json
    LANGUAGE sql
    SET search_path TO ''
    AS $$
    SELECT set_config('response.status', p_status::text, true),
           set_config('response.headers',
                      CASE WHEN p_retry_after IS NULL THEN '[]'
                           ELSE json_build_array(json_build_object(
                                    'Retry-After', p_retry_after::text))::text END,
                      true);
    SELECT json_build_object('code', p_code, 'message', p_message, 'details', NULL, 'hint',
                             CASE WHEN p_retry_after IS NULL THEN NULL
                                  ELSE format('Try again in %s second%s.', p_retry_after,
                                                   CASE WHEN p_retry_after = 1 THEN '' ELSE 's' END) END);
$$;

CREATE OR REPLACE FUNCTION shell_api.send_input(p_command_id bigint, p_data text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO ''
    AS $$
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
            HINT = 'Try again in 1 second; send larger pieces less often.';
    END IF;
    RETURN shell.add_input(target, 'data', p_data);
END
$$;
