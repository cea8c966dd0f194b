-- Templates: operators offer several sandbox images, each session runs on
-- one. A template is a name with its own current image (promotion is per
-- template), a session keeps the template it was made with (forks and
-- replays take their source's), and a tenant may use the open templates
-- plus those an administrator granted. `base` is today's image: open to
-- all, and when nothing was promoted for it executors use PG_SHELL_IMAGE.

CREATE TABLE shell.templates (
    name        text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9-]{0,39}$'),
    description text NOT NULL DEFAULT '' CHECK (length(description) <= 500),
    -- open: every tenant may use it; else only those granted it
    is_open     boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE shell.templates ENABLE ROW LEVEL SECURITY;
INSERT INTO shell.templates (name, description, is_open)
VALUES ('base', 'Debian 12: bash, coreutils, python3, git, jq, less, nano, vim', true);

CREATE TABLE shell.template_grants (
    user_id  uuid NOT NULL REFERENCES shell.users (id) ON DELETE CASCADE,
    template text NOT NULL REFERENCES shell.templates (name) ON DELETE CASCADE,
    PRIMARY KEY (user_id, template)
);
ALTER TABLE shell.template_grants ENABLE ROW LEVEL SECURITY;

-- Images already promoted are base's.
ALTER TABLE shell.images
    ADD COLUMN template text NOT NULL DEFAULT 'base' REFERENCES shell.templates (name),
    ADD COLUMN size_bytes bigint CHECK (size_bytes >= 0);
DROP INDEX shell.images_one_current;
-- At most one current image per template.
CREATE UNIQUE INDEX images_one_current ON shell.images (template) WHERE is_current;

ALTER TABLE shell.sessions
    ADD COLUMN template text NOT NULL DEFAULT 'base' REFERENCES shell.templates (name);

-- A fork or a replay runs on what its source ran on: set here, so every
-- function that makes one (shell.new_session's callers) gets it.
CREATE FUNCTION shell.inherit_template() RETURNS trigger
LANGUAGE plpgsql SET search_path = '' AS $$
BEGIN
    IF NEW.forked_from_command_id IS NOT NULL THEN
        SELECT s.template INTO NEW.template
        FROM shell.commands c JOIN shell.sessions s ON s.id = c.session_id
        WHERE c.id = NEW.forked_from_command_id;
    ELSIF NEW.replay_of_session_id IS NOT NULL THEN
        SELECT s.template INTO NEW.template FROM shell.sessions s WHERE s.id = NEW.replay_of_session_id;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER sessions_inherit_template BEFORE INSERT ON shell.sessions
FOR EACH ROW EXECUTE FUNCTION shell.inherit_template();

-- The templates p_user_id may start a session on: open or granted, and
-- runnable (base always is; another needs a promoted image).
CREATE FUNCTION shell.usable_templates(p_user_id uuid)
RETURNS TABLE (name text, description text, digest text, size_bytes bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT t.name, t.description, i.digest, i.size_bytes
    FROM shell.templates t
    LEFT JOIN shell.images i ON i.template = t.name AND i.is_current
    WHERE (t.is_open OR EXISTS (SELECT 1 FROM shell.template_grants g
                                WHERE g.user_id = p_user_id AND g.template = t.name))
      AND (t.name = 'base' OR i.digest IS NOT NULL)
    ORDER BY t.name = 'base' DESC, t.name
$$;

CREATE FUNCTION shell_api.list_templates()
RETURNS TABLE (name text, description text, digest text, size_bytes bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT * FROM shell.usable_templates((SELECT shell.current_user_id()))
$$;

-- A template the tenant may not use is answered as an unknown one: which
-- templates exist beyond one's own is not a tenant's business.
DROP FUNCTION shell_api.create_session(text);
CREATE FUNCTION shell_api.create_session(p_name text DEFAULT NULL, p_template text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    me uuid := shell.current_user_id();
    chosen text := coalesce(p_template, 'base');
    new_id uuid;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM shell.usable_templates(me) t WHERE t.name = chosen) THEN
        RAISE EXCEPTION 'no template %', left(chosen, 100) USING ERRCODE = '22023',
            HINT = 'Templates you may use: '
                   || (SELECT string_agg(t.name, ', ') FROM shell.usable_templates(me) t) || '.';
    END IF;
    new_id := shell.new_session(me, p_name, '/home/sandbox', '{}'::jsonb);
    UPDATE shell.sessions s SET template = chosen WHERE s.id = new_id;
    RETURN new_id;
END
$$;

-- An administrator's: makes a template (or changes its description and
-- whether it is open). Its image comes with promote_image.
CREATE FUNCTION shell.define_template(p_name text, p_description text DEFAULT NULL,
                                      p_open boolean DEFAULT NULL)
RETURNS TABLE (name text, description text, is_open boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    IF p_name IS NULL OR p_name !~ '^[a-z][a-z0-9-]{0,39}$' THEN
        RAISE EXCEPTION 'not a template name: %', coalesce(left(p_name, 100), 'NULL')
            USING ERRCODE = '22023',
                  HINT = 'A lowercase letter, then up to 39 lowercase letters, digits or dashes.';
    END IF;
    IF length(p_description) > 500 THEN
        RAISE EXCEPTION 'a template description is at most 500 characters' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    INSERT INTO shell.templates AS t (name, description, is_open)
    VALUES (p_name, coalesce(p_description, ''), coalesce(p_open, false))
    ON CONFLICT ON CONSTRAINT templates_pkey DO UPDATE
        SET description = coalesce(p_description, t.description), is_open = coalesce(p_open, t.is_open)
    RETURNING t.name, t.description, t.is_open;
END
$$;

-- An administrator's: the templates (besides the open ones) a user may use,
-- replacing what was granted before.
CREATE FUNCTION shell.set_user_templates(p_username text, p_templates text[])
RETURNS TABLE (template text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    target uuid;
    unknown text;
BEGIN
    SELECT u.id INTO target FROM shell.users u WHERE u.username = p_username;
    IF target IS NULL THEN
        RAISE EXCEPTION 'no user %', p_username USING ERRCODE = '22023';
    END IF;
    SELECT string_agg(n, ', ') INTO unknown
    FROM unnest(coalesce(p_templates, '{}')) n
    WHERE NOT EXISTS (SELECT 1 FROM shell.templates t WHERE t.name = n);
    IF unknown IS NOT NULL THEN
        RAISE EXCEPTION 'no template %', unknown USING ERRCODE = '22023',
            HINT = 'Templates: ' || (SELECT string_agg(t.name, ', ' ORDER BY t.name) FROM shell.templates t) || '.';
    END IF;
    DELETE FROM shell.template_grants g WHERE g.user_id = target;
    INSERT INTO shell.template_grants (user_id, template)
    SELECT DISTINCT target, n FROM unnest(coalesce(p_templates, '{}')) n;
    RETURN QUERY SELECT g.template FROM shell.template_grants g WHERE g.user_id = target ORDER BY 1;
END
$$;

-- As in 0010, per template: makes p_digest the current image of
-- p_template. An image belongs to one template.
DROP FUNCTION shell.promote_image(text);
CREATE FUNCTION shell.promote_image(p_digest text, p_template text DEFAULT 'base',
                                    p_size_bytes bigint DEFAULT NULL)
RETURNS TABLE (digest text, template text, promoted_at timestamptz, previous text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    old text;
    owner text;
BEGIN
    IF p_digest IS NULL OR p_digest !~ '^sha256:[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'not an image digest: %', coalesce(left(p_digest, 100), 'NULL')
            USING ERRCODE = '22023', HINT = 'Give the image id, sha256: and 64 hex digits.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM shell.templates t WHERE t.name = p_template) THEN
        RAISE EXCEPTION 'no template %', coalesce(left(p_template, 100), 'NULL') USING ERRCODE = '22023',
            HINT = 'Define it first: pg-shell image template NAME.';
    END IF;
    -- Serializes concurrent promotions (the unique index would fail one).
    LOCK TABLE shell.images IN SHARE ROW EXCLUSIVE MODE;
    SELECT i.template INTO owner FROM shell.images i WHERE i.digest = p_digest;
    IF owner IS DISTINCT FROM p_template AND owner IS NOT NULL THEN
        RAISE EXCEPTION 'image % is template %''s', p_digest, owner USING ERRCODE = '22023',
            HINT = 'An image belongs to one template: build one for this template.';
    END IF;
    SELECT i.digest INTO old FROM shell.images i WHERE i.is_current AND i.template = p_template;
    UPDATE shell.images i SET is_current = false
    WHERE i.is_current AND i.template = p_template AND i.digest <> p_digest;
    INSERT INTO shell.images AS i (digest, template, size_bytes, is_current)
    VALUES (p_digest, p_template, p_size_bytes, true)
    ON CONFLICT ON CONSTRAINT images_pkey DO UPDATE
        SET is_current = true, promoted_at = now(), promoted_by = session_user,
            size_bytes = coalesce(p_size_bytes, i.size_bytes);
    RETURN QUERY SELECT i.digest, i.template, i.promoted_at, old FROM shell.images i WHERE i.digest = p_digest;
END
$$;

-- Every template's current image: what executors poll each round.
DROP FUNCTION shell.current_image();
CREATE FUNCTION shell.current_images()
RETURNS TABLE (template text, digest text, promoted_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT i.template, i.digest, i.promoted_at FROM shell.images i WHERE i.is_current ORDER BY 1
$$;

-- As in 0010, with the template of each image.
DROP FUNCTION shell.image_usage();
CREATE FUNCTION shell.image_usage()
RETURNS TABLE (digest text, template text, commands bigint, last_used_at timestamptz,
               promoted_at timestamptz, is_current boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    WITH used AS (
        SELECT c.image_digest AS digest, count(*) AS commands,
               max(coalesce(c.started_at, c.submitted_at)) AS last_used_at
        FROM shell.commands c
        WHERE c.image_digest IS NOT NULL
        GROUP BY c.image_digest
    )
    SELECT coalesce(u.digest, i.digest), i.template, coalesce(u.commands, 0), u.last_used_at,
           i.promoted_at, coalesce(i.is_current, false)
    FROM used u
    FULL JOIN shell.images i ON i.digest = u.digest
    ORDER BY i.promoted_at DESC NULLS LAST, u.last_used_at DESC NULLS LAST
$$;

-- As in 0011, and it says which template the command's session runs on.
DROP FUNCTION shell.claim_commands(text, integer, integer, text, integer);
CREATE FUNCTION shell.claim_commands(p_worker_id text, p_limit integer, p_lease_seconds integer DEFAULT 30,
                                     p_host text DEFAULT NULL, p_grace_ms integer DEFAULT 0)
RETURNS TABLE (command_id bigint, session_id uuid, user_id uuid, command text, cwd text, env jsonb,
               attempt integer, image_digest text, root text, upload jsonb, template text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
#variable_conflict use_column
DECLARE
    lane record;
    head_id bigint;
    seq bigint;
    claimed integer := 0;
    scanned integer := 0;
    -- Read with FETCH, one lane at a time, so only the lanes examined are
    -- locked: a FOR loop prefetches rows and would lock lanes it never
    -- claims, holding other sessions back until this transaction ends.
    ready_lanes CURSOR FOR
        SELECT l.session_id, l.user_id, l.cached_on, l.ready_since FROM shell.lanes l
        WHERE l.pending > 0 AND l.active_command_id IS NULL
        ORDER BY l.ready_since
        FOR UPDATE SKIP LOCKED;
BEGIN
    PERFORM shell.check_worker(p_worker_id, p_lease_seconds);
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 1000' USING ERRCODE = '22023';
    END IF;
    IF p_grace_ms IS NULL OR p_grace_ms NOT BETWEEN 0 AND 10000 THEN
        RAISE EXCEPTION 'p_grace_ms must be between 0 and 10000' USING ERRCODE = '22023';
    END IF;
    OPEN ready_lanes;
    LOOP
        -- Lanes skipped for a user's quota stay locked until commit; bound
        -- the scan so one tenant's backlog cannot make a claim expensive.
        EXIT WHEN claimed >= p_limit OR scanned >= p_limit * 4 + 32;
        FETCH ready_lanes INTO lane;
        EXIT WHEN NOT FOUND;
        scanned := scanned + 1;
        CONTINUE WHEN lane.cached_on IS DISTINCT FROM p_host AND lane.cached_on IS NOT NULL
                  AND lane.ready_since > clock_timestamp() - make_interval(secs => p_grace_ms / 1000.0);
        -- One claimer at a time per user, so max_running holds under
        -- concurrency; a user being claimed elsewhere is simply skipped.
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(hashtextextended('shell.user:' || lane.user_id, 0));
        IF (SELECT count(*) FROM shell.commands c
            WHERE c.user_id = lane.user_id AND c.status IN ('claimed', 'running'))
           >= (SELECT u.max_running FROM shell.users u WHERE u.id = lane.user_id) THEN
            -- Behind the others: a tenant at its quota must not fill the
            -- front of every scan and starve other tenants' sessions.
            UPDATE shell.lanes l SET ready_since = now() WHERE l.session_id = lane.session_id;
            CONTINUE;
        END IF;
        SELECT c.id INTO head_id FROM shell.commands c
        WHERE c.session_id = lane.session_id AND c.status = 'pending'
        ORDER BY c.id LIMIT 1;
        UPDATE shell.lanes l SET pending = l.pending - 1, active_command_id = head_id,
            change_seq = l.change_seq + 1
        WHERE l.session_id = lane.session_id RETURNING l.change_seq INTO seq;
        RETURN QUERY
        UPDATE shell.commands c SET status = 'claimed', worker_id = p_worker_id,
            attempts = c.attempts + 1, claimed_at = now(),
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            cwd_before = s.cwd, env_before = s.env, root_before = s.root, change_seq = seq
        FROM shell.sessions s
        WHERE c.id = head_id AND s.id = c.session_id
        RETURNING c.id, c.session_id, c.user_id, c.command, c.cwd_before, c.env_before, c.attempts,
                  c.image_digest, c.root_before, c.upload, s.template;
        claimed := claimed + 1;
    END LOOP;
    CLOSE ready_lanes;
END
$$;

COMMENT ON FUNCTION shell.claim_commands(text, integer, integer, text, integer) IS
    'Executor: claims the head command of up to p_limit sessions with nothing running, oldest-ready first, '
    'within each user''s max_running, leased for p_lease_seconds; a session another host holds the files of '
    '(cached_on) is left to it for p_grace_ms. Returns what to run, with its session''s template. 22023 for '
    'a bad worker id, limit, lease or grace.';
COMMENT ON FUNCTION shell_api.create_session(text, text) IS
    'Starts a new session of the caller (home /home/sandbox, no files) on a template (default base), '
    'optionally named, and returns its id. 22023 for a name not 1-200 characters or a template the caller '
    'may not use (the hint lists those it may), PT429 when max_sessions unarchived sessions exist.';
COMMENT ON FUNCTION shell_api.list_templates() IS
    'The templates the caller may start a session on: name, description, current image digest (null for '
    'base when executors use PG_SHELL_IMAGE) and its size in bytes when known.';
COMMENT ON FUNCTION shell.usable_templates(uuid) IS
    'The templates a user may use: open or granted, with a current image (base always).';
COMMENT ON FUNCTION shell.define_template(text, text, boolean) IS
    'Administrator (pg-shell image template): creates a template or changes its description and whether '
    'every tenant may use it. 22023 for a bad name or a description over 500 characters.';
COMMENT ON FUNCTION shell.set_user_templates(text, text[]) IS
    'Administrator (pg-shell user templates): the templates beyond the open ones a user may use, replacing '
    'the previous grant. 22023 for an unknown user or template.';
COMMENT ON FUNCTION shell.promote_image(text, text, bigint) IS
    'Administrator (pg-shell image promote): makes an image (sha256: and 64 hex digits) the current one of '
    'a template (default base); returns it with the one it replaced. 22023 for a malformed digest, an '
    'unknown template, or an image that is another template''s.';
COMMENT ON FUNCTION shell.current_images() IS
    'Executor and administrator: each template''s current image (template, digest, promoted_at); base has '
    'no row when executors use PG_SHELL_IMAGE. Cheap enough to poll.';
COMMENT ON FUNCTION shell.image_usage() IS
    'Administrator (pg-shell image list, prune): every image promoted or used by a kept command, with its '
    'template, how many commands, last use and whether it is current. Scans the history.';
COMMENT ON FUNCTION shell.inherit_template() IS
    'Trigger: a fork or a replay runs on its source session''s template.';
COMMENT ON TABLE shell.templates IS
    'Sandbox images offered to tenants, by name; each has its own current image in shell.images.';
COMMENT ON TABLE shell.template_grants IS
    'Which users may use which templates that are not open.';

-- The page: a session on a template other than base says which in the
-- list (as in 0033 otherwise) ...
CREATE OR REPLACE FUNCTION shell_api.sessions_html() RETURNS shell_api."text/html"
LANGUAGE plpgsql STABLE SET search_path = '' AS $$
DECLARE
    me uuid := shell.current_user_id();
BEGIN
    RETURN coalesce(
        (SELECT string_agg(format(
            '<li data-id="%s"><a href="#session=%s" class="name">%s</a>'
            '<span class="info">%s%s · <time datetime="%s">%s</time></span>%s'
            '<span class="actions"><button type="button" class="rename">rename</button>'
            '<button type="button" class="archive">archive</button></span></li>',
            s.id, s.id, shell.html_escape(coalesce(nullif(s.name, ''), s.id::text)),
            CASE WHEN s.template <> 'base' THEN shell.html_escape(s.template) || ' · ' ELSE '' END,
            shell.html_escape(s.cwd),
            to_char(s.last_active_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
            to_char(s.last_active_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"'),
            array_to_string(shell.render_lineage(s), '')),
            E'\n' ORDER BY s.last_active_at DESC, s.id)
         FROM shell.sessions s
         WHERE s.user_id = me AND s.archived_at IS NULL),
        '<li class="empty">No sessions yet.</li>');
END
$$;

-- ... and "new session" offers the caller's templates: one <option> each,
-- base first and selected.
CREATE FUNCTION shell_api.template_options_html() RETURNS shell_api."text/html"
LANGUAGE sql STABLE SET search_path = '' AS $$
    SELECT coalesce(string_agg(format(
        '<option value="%s"%s>%s</option>', shell.html_escape(t.name),
        CASE WHEN t.name = 'base' THEN ' selected' ELSE '' END,
        shell.html_escape(t.name || CASE WHEN t.description <> '' THEN ' — ' || t.description
                                         ELSE '' END)), E'\n' ORDER BY t.ord), '')
    FROM shell_api.list_templates() WITH ORDINALITY AS t(name, description, digest, size_bytes, ord)
$$;
COMMENT ON FUNCTION shell_api.template_options_html() IS
    'The page''s template picker as HTML: an <option> per template list_templates gives, base first and '
    'selected. 42501 when not signed in.';
