-- The helpers that render and describe rows inherit the search path. They
-- are SQL functions run with the caller's rights, called by the API
-- functions, which set the search path to '' themselves (and keep it set
-- around everything they call). With a SET clause of its own, PostgreSQL
-- cannot inline a SQL function and plans its body again on every call:
-- shell.render_command took 0.62 ms a call with it and 0.08 ms without,
-- once per command in every listing and every live-feed answer. Their
-- names are all schema-qualified, as written for an empty path, and they
-- run with no one's rights but the caller's, so the path of whoever calls
-- them directly gives that caller nothing. SECURITY DEFINER functions and
-- the shell_api entry points keep theirs.

ALTER FUNCTION shell.ansi_html(t text) RESET search_path;
ALTER FUNCTION shell.ansi_state(t text) RESET search_path;
ALTER FUNCTION shell.base64url(data bytea) RESET search_path;
ALTER FUNCTION shell.command_buttons(c shell.commands) RESET search_path;
ALTER FUNCTION shell.compare_side(p_label text, p_status text, p_exit_code integer, p_output text, p_other_exit_code integer, p_other_output text) RESET search_path;
ALTER FUNCTION shell.empty_tree() RESET search_path;
ALTER FUNCTION shell.entry_bytes(p_name text, p_target text) RESET search_path;
ALTER FUNCTION shell.html_escape(t text) RESET search_path;
ALTER FUNCTION shell.is_pinned(p_command_id bigint) RESET search_path;
ALTER FUNCTION shell.outcome_class(c shell.commands) RESET search_path;
ALTER FUNCTION shell.outcome_words(c shell.commands, p_limit_s numeric) RESET search_path;
ALTER FUNCTION shell.output_of(c shell.commands) RESET search_path;
ALTER FUNCTION shell.raw_html(t text) RESET search_path;
ALTER FUNCTION shell.render_command(c shell.commands) RESET search_path;
ALTER FUNCTION shell.render_lineage(s shell.sessions) RESET search_path;
ALTER FUNCTION shell.result_facts(c shell.commands) RESET search_path;
ALTER FUNCTION shell.session_link(p_session_id uuid) RESET search_path;
ALTER FUNCTION shell.sha256_hex(t text) RESET search_path;
ALTER FUNCTION shell.short_cwd(p_cwd text) RESET search_path;
ALTER FUNCTION shell.size_words(p_bytes bigint) RESET search_path;
ALTER FUNCTION shell.tree_hash(p_entries jsonb) RESET search_path;
ALTER FUNCTION shell.utc_text(t timestamp with time zone) RESET search_path;
