-- Every privilege in one place. Re-applied by `pg-shell db migrate` whenever
-- this file changes, so it starts from nothing and grants what each role needs.

REVOKE ALL ON SCHEMA shell, shell_api FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA shell FROM PUBLIC, shell_anon, shell_user, shell_executor, shell_admin, shell_authenticator;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA shell FROM PUBLIC, shell_anon, shell_user, shell_executor, shell_admin, shell_authenticator;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA shell, shell_api FROM PUBLIC, shell_anon, shell_user, shell_executor, shell_admin, shell_authenticator;

-- The authenticator becomes the role a JWT names (PostgREST's model).
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['shell_anon', 'shell_user'] LOOP
        IF NOT pg_has_role('shell_authenticator', r, 'MEMBER') THEN
            EXECUTE format('GRANT %I TO shell_authenticator', r);
        END IF;
    END LOOP;
END
$$;

-- Anonymous visitors can only log in.
GRANT USAGE ON SCHEMA shell_api TO shell_anon;
GRANT EXECUTE ON FUNCTION shell_api.login(text, text) TO shell_anon;

-- Tenants: the API, plus reading their own rows (row-level security).
GRANT USAGE ON SCHEMA shell, shell_api TO shell_user;
GRANT EXECUTE ON FUNCTION
    shell_api.create_session(text, text, text[]),
    shell_api.list_templates(),
    shell_api.template_options_html(),
    shell_api.list_sessions(),
    shell_api.submit_command(uuid, text, boolean, integer, integer, text),
    shell_api.latest_output(uuid, bigint, integer, bigint, integer),
    shell_api.latest_output_html(uuid, bigint, integer, bigint, integer),
    shell_api.session_changes(uuid, bigint, integer, boolean, integer),
    shell_api.session_changes_html(uuid, bigint, integer, boolean, integer),
    shell_api.read_output(bigint, bigint, integer),
    shell_api.read_output_html(bigint, bigint, integer),
    shell_api.session_cursor(uuid),
    shell_api.submit_command_html(uuid, text),
    shell_api.cancel_command(bigint),
    shell_api.fork_session(bigint),
    shell_api.replay_session(uuid, bigint),
    shell_api.replay_comparison(uuid),
    shell_api.output_timeline(bigint),
    shell_api.session_files(uuid, bigint, text, integer),
    shell_api.read_file(uuid, text, bigint),
    shell_api.command_changes(bigint),
    shell_api.upload_file(uuid, text, bytea, integer),
    -- files in parts (0023_streamed_files)
    shell_api.upload_part(uuid, integer, bytea),
    shell_api.upload_finish(uuid, uuid, text, integer),
    shell_api.upload_discard(uuid),
    shell_api.read_file_part(uuid, text, bigint, bigint, integer, text),
    shell_api.rename_session(uuid, text),
    shell_api.archive_session(uuid),
    shell_api.unarchive_session(uuid),
    shell_api.warm_session(uuid),
    shell_api.command_limits(),
    -- interactive commands (0029_interactive)
    shell_api.send_input(bigint, text),
    shell_api.close_input(bigint),
    shell_api.resize_terminal(bigint, integer, integer),
    shell_api.command_input(bigint),
    -- the page's views as HTML (0033_page_views_html)
    shell_api.sessions_html(),
    shell_api.session_lineage_html(uuid),
    shell_api.session_files_html(uuid),
    shell_api.replay_comparison_html(uuid),
    -- secrets (0045_secrets): set, listed by name, named by sessions; never read back
    shell_api.set_secret(text, text),
    shell_api.delete_secret(text),
    shell_api.list_secrets(),
    shell_api.set_session_secrets(uuid, text[]),
    -- the page's secrets view and checkboxes (0046_secrets_page)
    shell_api.secrets_html(),
    shell_api.secret_choices_html(uuid),
    -- helpers the invoker functions and policies call
    shell.current_user_id(),
    shell.session_not_found(),
    shell.readable_session(uuid),
    shell.command_not_found(),
    shell.check_page(bigint, integer),
    shell.output_of(shell.commands),
    -- listings within a byte budget (0014_listings_live)
    shell.listing_budget(),
    shell.check_output_limit(integer),
    shell.utf8_slice(text, bigint, bigint),
    shell.output_piece(shell.commands, bigint, bigint, bigint),
    shell.latest_page(uuid, bigint, integer, bigint),
    shell.changes_page(uuid, bigint, integer),
    shell.listing(shell.commands[], integer, bigint),
    shell.render_listing(shell.listing_row[]),
    shell.render_piece(shell.listing_row),
    shell.html_escape(text),
    shell.raw_html(text),
    shell.ansi_html(text),
    shell.ansi_scan(text, boolean),
    shell.ansi_state(text),
    shell.ansi_screen(text),
    shell.ansi_line_html(text, text, text[]),
    shell.ansi_unfinished(text),
    shell.ansi_clears(text, text),
    shell.ansi_open_line(text),
    shell.pre_text(text),
    shell.ansi_number(text),
    shell.ansi_colour(text[]),
    shell.ansi_rgb_index(integer, integer, integer),
    shell.ansi_pen_apply(shell.ansi_pen, text),
    shell.ansi_pen_classes(shell.ansi_pen),
    shell.ansi_pen_sgr(shell.ansi_pen),
    shell.output_before(shell.commands, bigint, integer),
    shell.render_command(shell.commands),
    shell.render_changes(shell.commands),
    shell.some_changes(bigint, integer),
    shell.outcome_class(shell.commands),
    shell.outcome_words(shell.commands, numeric),
    shell.short_cwd(text),
    shell.command_buttons(shell.commands),
    shell.time_limit_s(),
    shell.session_link(uuid),
    shell.render_lineage(shell.sessions),
    shell.size_words(bigint),
    shell.compare_side(text, text, integer, text, integer, text)
TO shell_user;
GRANT SELECT ON shell.sessions, shell.commands, shell.output_chunks, shell.command_input TO shell_user;

-- Executors: only their entry points.
GRANT USAGE ON SCHEMA shell TO shell_executor;
GRANT EXECUTE ON FUNCTION
    shell.claim_commands(text, integer, integer, text, integer, text[], integer),
    shell.heartbeat(text, bigint[], integer[], integer),
    shell.mark_created(bigint, text, integer, text),
    shell.mark_started(bigint, text, integer, text, text, text),
    shell.append_output(bigint, text, integer, integer, text, boolean),
    shell.announce_output(bigint, text, integer),
    shell.complete_command(bigint, text, integer, text, text, text),
    shell.chain_position(bigint, text, integer),
    shell.register_signing_key(text, text),
    shell.register_secrets_key(text, text),
    shell.secrets_key_in_use(),
    shell.adopt_session(uuid, text),
    shell.host_sessions(uuid[]),
    shell.ended_containers(text[]),
    shell.expire_leases(),
    shell.settle_worker(text, bigint[]),
    shell.live_commands(bigint[]),
    shell.queue_depth(),
    shell.current_images(),
    -- the workspace: blobs and trees in, listings and differences out
    shell.missing_blobs(text[]),
    shell.put_blob_chunk(text, bigint, integer, integer, bytea),
    shell.put_blobs(text[], bytea[]),
    shell.blob_chunk(text, integer),
    shell.blob_chunks_of(text[]),
    shell.put_trees(jsonb),
    shell.tree_listing(text),
    shell.tree_diff(text, text),
    shell.complete_upload(bigint, text, integer),
    -- interactive commands: input delivered, echo followed, input sealed
    shell.command_terminal(bigint, text, integer),
    shell.pending_input(bigint, text, integer, integer),
    shell.input_delivered(bigint, text, integer, integer, integer[]),
    shell.terminal_echo(bigint, text, integer, boolean),
    shell.seal_input(bigint, text, integer),
    -- the time limit the page shows a running command against
    shell.publish_time_limit(numeric)
TO shell_executor;

-- Blobs reach the database by binary COPY into a temporary table of the
-- executor's own connection (executor/db/workspace.py): granted here, so a
-- database whose PUBLIC lost TEMPORARY still takes them.
DO $$
BEGIN
    EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO shell_executor', current_database());
END
$$;

-- Administrators: user management, audit (`pg-shell audit`) and retention
-- (`pg-shell cleanup`, which signs its checkpoints with its own key).
GRANT USAGE ON SCHEMA shell TO shell_admin;
GRANT EXECUTE ON FUNCTION
    shell.create_user(text, text),
    shell.set_user_quota(text, integer, integer, integer, integer, integer, integer, integer, integer,
                         integer, integer, integer),
    shell.audit_history(uuid),
    shell.audit_sessions(uuid),
    shell.audit_keys(),
    -- `audit verify --files`: trees and blobs read to recompute their hashes
    shell.audit_trees(text[]),
    shell.audit_blobs(text[]),
    -- the input each record's input_sha256 is recomputed from (0030_audit_input)
    shell.audit_input(uuid),
    shell.blob_chunk(text, integer),
    shell.register_signing_key(text, text),
    shell.retention_sessions(timestamptz, uuid, integer),
    shell.retention_plan(uuid, timestamptz, integer),
    shell.apply_retention(uuid, bigint[], bigint, text, bigint, text, text, text),
    shell.idle_sessions(uuid[], timestamptz),
    shell.host_sessions(uuid[]),
    shell.collect_files(interval),
    shell.collect_upload_parts(),
    shell.usage_report(text, timestamptz),
    -- image rollout, templates and runtimes (`pg-shell image promote|list|prune|template`,
    -- `pg-shell user templates|runtime`)
    shell.promote_image(text, text, bigint),
    shell.current_images(),
    shell.image_usage(),
    shell.define_template(text, text, boolean),
    shell.set_user_templates(text, text[]),
    shell.set_user_runtime(text, text)
TO shell_admin;
GRANT SELECT ON shell.users TO shell_admin;

-- The gateway verifies tokens with the database's secret.
GRANT USAGE ON SCHEMA shell TO shell_authenticator;
GRANT EXECUTE ON FUNCTION shell.jwt_secret() TO shell_authenticator, shell_admin;
-- PostgREST's db-pre-request (0023_streamed_files): runs as the request's role, anonymous
-- ones too (the schema's other functions stay out of their reach: EXECUTE is granted by name).
GRANT USAGE ON SCHEMA shell TO shell_anon;
GRANT EXECUTE ON FUNCTION shell.request_slot() TO shell_anon, shell_user;
-- … and exports the queue depth on /metrics.
GRANT EXECUTE ON FUNCTION shell.queue_depth() TO shell_authenticator;
