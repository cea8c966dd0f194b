-- Comments on the current schema. sql/schema.sql is what people read to learn
-- the schema, and the explanations used to live only as `--` lines above
-- definitions in the migrations, many of them since replaced. This migration
-- changes nothing but comments: one on every function of shell_api and shell
-- (pgcrypto's aside), on every table of shell, and on a few columns, saying what
-- each does now, who calls it and the SQLSTATEs of its refusals. The migrations
-- remain the history.
--
-- CREATE OR REPLACE keeps a function's comment (update it when the function
-- changes); DROP and CREATE lose it. tests/db/test_schema_snapshot.py fails
-- while a function or table has none.

-- The tenant API (shell_api), called over HTTP through PostgREST or `pg-shell serve`.

COMMENT ON FUNCTION shell_api.login(text, text) IS
    'Logs in (anonymous callers, role shell_anon): returns {"token": a JWT for role shell_user, valid '
    'jwt_ttl_seconds}. A wrong name or password answers 403 (code 28P01) and counts a failure; past '
    'login_free_failures the name is closed with growing back-off and answers 429 (PT429, Retry-After).';

COMMENT ON FUNCTION shell_api.create_session(text) IS
    'Starts a new session of the caller (home /home/sandbox, no files), optionally named, and returns its '
    'id. 22023 for a name not 1-200 characters, PT429 when max_sessions unarchived sessions exist.';

COMMENT ON FUNCTION shell_api.list_sessions() IS
    'The caller''s sessions that are not archived, most recently active first, with where each came from: '
    'the command and session it was forked from, the session it replays.';

COMMENT ON FUNCTION shell_api.latest_output(uuid, bigint, integer, bigint, integer) IS
    'A page of a session''s commands, oldest first: those after p_since_id, or (p_since_id 0) the newest '
    'p_limit, before p_before_id if given. Each row has at most p_output_limit bytes of output '
    '(output_offset, output_bytes, output_cut tell which), the answer at most shell.listing_budget(); 22023 '
    'for a bad cursor or limit, or an unknown session.';

COMMENT ON FUNCTION shell_api.latest_output_html(uuid, bigint, integer, bigint, integer) IS
    'latest_output''s page as the terminal page''s HTML (one article per command, shell.render_listing), '
    'with the same arguments and errors.';

COMMENT ON FUNCTION shell_api.session_changes(uuid, bigint, integer, boolean, integer) IS
    'The live feed: up to p_limit commands whose status or output changed after the change cursor '
    'p_after_change (clamped to the session''s newest change), oldest first; poll again with the largest '
    'change_seq seen. With p_tail a row''s output is only what arrived after the cursor. 22023 for bad '
    'arguments or an unknown session.';

COMMENT ON FUNCTION shell_api.session_changes_html(uuid, bigint, integer, boolean, integer) IS
    'session_changes'' page as the terminal page''s HTML (shell.render_listing), with the same arguments '
    'and errors.';

COMMENT ON FUNCTION shell_api.session_cursor(uuid) IS
    'The session''s newest change number (0 when none): the cursor to start following it with '
    'session_changes. 22023 for an unknown session.';

COMMENT ON FUNCTION shell_api.read_output(bigint, bigint, integer) IS
    'A command''s whole output a page at a time: from byte p_offset at most p_limit bytes (cut back to a '
    'character, and to the listing budget as JSON), with next_offset to continue and output_bytes so far. '
    '22023 for an unknown command, an offset outside the output or inside a character, or a bad limit.';

COMMENT ON FUNCTION shell_api.read_output_html(bigint, bigint, integer) IS
    'A read_output page as the terminal page''s HTML, rendered like a listing''s piece: in the colours the '
    'output before it left, <pre class="out"> carrying data-from, data-end and data-bytes, shortened to the '
    'listing budget. read_output''s errors.';

COMMENT ON FUNCTION shell_api.submit_command_html(uuid, text) IS
    'submit_command (no terminal, no input) for the web page: answers the new command''s article as HTML. '
    'submit_command''s errors.';

COMMENT ON FUNCTION shell_api.cancel_command(bigint) IS
    'Cancels a command: a pending one ends at once, a claimed or running one is flagged and its executor '
    '(told on shell_cancel) kills it. Returns false if it had already ended; 22023 for an unknown command.';

COMMENT ON FUNCTION shell_api.fork_session(bigint) IS
    'A new session that starts from the cwd, environment and files a finished command left; returns its id. '
    '22023 for an unknown command or one that has not finished, PT429 at max_sessions.';

COMMENT ON FUNCTION shell_api.replay_session(uuid, bigint) IS
    'Re-queues the session''s original commands from p_start_id on in a new session that starts from the '
    'cwd, environment and files they started from (uploads as uploads, recorded input at its offsets); '
    'returns the new session''s id, the replay run. 22023 when p_start_id is not an original command of the '
    'session, PT409 when one took input with echo off, PT429 at a quota.';

COMMENT ON FUNCTION shell_api.replay_comparison(uuid) IS
    'A replay run (the session replay_session returned) side by side with the commands it re-ran, in order: '
    'status, exit code, output and image of each. 22023 for an unknown session or one that is no replay run.';

COMMENT ON FUNCTION shell_api.output_timeline(bigint) IS
    'A command''s output chunks with when each arrived, in ms after the command started (0 before its start '
    'was recorded), to play output back with its timing. 22023 for an unknown command.';

COMMENT ON FUNCTION shell_api.session_files(uuid, bigint, text, integer) IS
    'The session''s files now, or right after its command p_command_id, a page at a time: up to p_limit '
    '(1-1000) entries after the path p_after, each directory followed by what it holds; a short page is the '
    'last. 22023 for an unknown session or command, an unfinished command, a bad path or limit.';

COMMENT ON FUNCTION shell_api.read_file(uuid, text, bigint) IS
    'The bytes of the file at p_path (relative to the home) now, or right after p_command_id, served raw '
    '(application/octet-stream). 22023 for a bad path, no such file or not a regular file; XX001 when the '
    'stored bytes do not match their hash.';

COMMENT ON FUNCTION shell_api.read_file_part(uuid, text, bigint, bigint, integer, text) IS
    'A slice of a file: p_length bytes (at most 4 MiB) from p_offset, with the file''s sha256 and size to '
    'check the whole against. Given p_sha256 from a first slice, a file changed since is refused with '
    'PT409; otherwise read_file''s errors, and 22023 for a bad offset or length.';

COMMENT ON FUNCTION shell_api.command_changes(bigint) IS
    'What a finished command changed in the session''s files: one row per added, modified or deleted path, '
    'parents first; empty when it changed nothing. 22023 for an unknown or unfinished command.';

COMMENT ON FUNCTION shell_api.upload_file(uuid, text, bytea, integer) IS
    'Puts a file (at most 64 MiB, mode 0-511, default 0644) at p_path of an idle session as an entry of its '
    'history, and returns the entry''s command id. 22023 for an unknown session, a bad path or mode, PT413 '
    'too large or over the files quota or caps, PT409 for a busy session or one whose files are not in the '
    'database yet, PT429 over max_uploads_per_minute.';

COMMENT ON FUNCTION shell_api.upload_part(uuid, integer, bytea) IS
    'Stages part p_seq (in order from 0, at most 4 MiB) of an upload under an id the client chose; returns '
    'the bytes staged for it so far. 22023 for a part out of order, PT413 past 64 MiB, PT429 past '
    'upload_open_max uploads or upload_staged_max_bytes staged. Finish with upload_finish.';

COMMENT ON FUNCTION shell_api.upload_finish(uuid, uuid, text, integer) IS
    'Puts a staged upload at p_path of the session through upload_file (every check and error of it '
    'applies) and returns the entry''s command id; after a refusal the parts stay, to finish again. 22023 '
    'for an unknown upload or one missing parts.';

COMMENT ON FUNCTION shell_api.upload_discard(uuid) IS
    'Drops the caller''s staged upload; nothing happens if there is none.';

COMMENT ON FUNCTION shell_api.rename_session(uuid, text) IS
    'Renames a session (1-200 characters, trimmed). 22023 for a blank or long name, or an unknown or '
    'archived session.';

COMMENT ON FUNCTION shell_api.archive_session(uuid) IS
    'Archives a session: it leaves the list and the quota and takes no more commands, its history stays; '
    'executors are told (shell_archived) to drop their copies. PT409 while it has unfinished commands, '
    '22023 for an unknown session.';

COMMENT ON FUNCTION shell_api.warm_session(uuid) IS
    'Called when the page shows a session: asks an executor to start its next container before anything is '
    'typed. Does nothing for a busy session, within 5 s of the last ask, or when 3 other sessions of the '
    'user asked within a minute; 22023 for an unknown session.';

COMMENT ON FUNCTION shell_api.command_limits() IS
    '{"time_limit_s": n}: the command time limit the executors published (null before any started).';

-- Executor entry points (role shell_executor). A lease is (worker_id, attempt); PS001: the worker no longer
-- holds it.

COMMENT ON FUNCTION shell.claim_commands(text, integer, integer, text, integer) IS
    'Executor: claims the head command of up to p_limit sessions with nothing running, oldest-ready first, '
    'within each user''s max_running, leased for p_lease_seconds; a session another host holds the files of '
    '(cached_on) is left to it for p_grace_ms. Returns what to run. 22023 for a bad worker id, limit, lease '
    'or grace.';

COMMENT ON FUNCTION shell.heartbeat(text, bigint[], integer[], integer) IS
    'Executor: renews the leases the worker still holds on these (command, attempt) pairs and returns them, '
    'with whether the tenant asked to cancel; a command missing from the answer is lost. 22023 for a bad '
    'worker id or lease.';

COMMENT ON FUNCTION shell.mark_created(bigint, text, integer, text) IS
    'Executor: records the container made for a claimed command; from then on it counts as started and is '
    'never claimed again. PS001 when the lease is lost.';

COMMENT ON FUNCTION shell.mark_started(bigint, text, integer, text, text) IS
    'Executor: the command''s container runs (status running, with the image digest). Repeating it for the '
    'same container changes nothing; PS001 when the lease is lost.';

COMMENT ON FUNCTION shell.append_output(bigint, text, integer, integer, text, boolean) IS
    'Executor: stores output chunk p_seq of a running command (once per seq) and moves the session''s '
    'change cursor; with p_notify false listeners are not woken until announce_output. PS001 when the lease '
    'is lost.';

COMMENT ON FUNCTION shell.announce_output(bigint, text, integer) IS
    'Executor: wakes the listeners of a running command''s session (shell_changes) after output appended '
    'quietly. PS001 when the lease is lost.';

COMMENT ON FUNCTION shell.chain_position(bigint, text, integer) IS
    'Executor: the chain_seq and chain_prev the command''s result record must name, with the session''s '
    'lane locked until the transaction ends, so it signs and completes with nothing appended in between. '
    'PS001 when the lease is lost.';

COMMENT ON FUNCTION shell.complete_command(bigint, text, integer, text, text, text) IS
    'Executor: ends a claimed or running command as its result record says (status, exit code, reason, cwd, '
    'env and root after, host), chains the record (signed by p_key_id, else one of the database) and moves '
    'the session''s state. Files over the quota or caps fail the command and are not kept. 22023 for a bad '
    'record or an unstored root, PS001 when the lease is lost.';

COMMENT ON FUNCTION shell.complete_upload(bigint, text, integer) IS
    'Executor: applies a claimed upload (a replayed one) instead of running a container: the file is put '
    'into the session''s files, or the entry fails with the reason it no longer fits. 22023 for a command '
    'that is no upload, PS001 when the lease is lost.';

COMMENT ON FUNCTION shell.register_signing_key(text, text) IS
    'Executor and cleanup agent, at start: registers the public half of an Ed25519 signing key (64 hex '
    'digits); idempotent, returns its key id (the first 16 hex digits of its SHA-256). 22023 for a '
    'malformed key.';

COMMENT ON FUNCTION shell.expire_leases() IS
    'Executor (maintenance): settles every command whose lease ran out: one whose container never started '
    'is queued again (up to 5 attempts), one that started fails (executor lost). Returns each with its new '
    'status.';

COMMENT ON FUNCTION shell.settle_worker(text, bigint[]) IS
    'Executor, at start: settles what a predecessor with the same worker id held: unstarted commands are '
    'queued again, started ones (running, or in p_started_ids: containers the engine still has) fail. '
    'Returns each with its new status.';

COMMENT ON FUNCTION shell.live_commands(bigint[]) IS
    'Executor (container reaper): which of these commands are still claimed or running; their containers '
    'are kept.';

COMMENT ON FUNCTION shell.ended_containers(text[]) IS
    'Executor (container reaper): which of these containers ran a command that is no longer claimed or '
    'running, so they can go.';

COMMENT ON FUNCTION shell.adopt_session(uuid, text) IS
    'Executor: true for the one host that takes a session''s warm-start request: the host already preferred '
    'for it, or the first to ask, which becomes it. Never while a command of it runs, nor for an archived '
    'session or one whose files are not in the database; 22023 for a bad host name.';

COMMENT ON FUNCTION shell.host_sessions(uuid[]) IS
    'Executor and cleanup agent: of the sessions a host holds copies of, the owner of each, whether it is '
    'archived and whether its files are stored in the database; sessions not known are left out.';

COMMENT ON FUNCTION shell.queue_depth() IS
    'Pending commands of every tenant: the queue depth the executor and the gateway export as a metric, '
    'counted on a partial index.';

COMMENT ON FUNCTION shell.current_image() IS
    'Executor and administrator: the current image (digest, promoted_at), or no row, when executors use '
    'PG_SHELL_IMAGE. Cheap enough to poll.';

COMMENT ON FUNCTION shell.publish_time_limit(numeric) IS
    'Executor, at start: publishes its command time limit in seconds (config command_time_limit_s) for the '
    'page to count against; the last executor to start wins.';

COMMENT ON FUNCTION shell.missing_blobs(text[]) IS
    'Executor: which of these blobs are not completely stored; the stored ones are renewed against '
    'collection.';

COMMENT ON FUNCTION shell.put_blob_chunk(text, bigint, integer, integer, bytea) IS
    'Executor: stores chunk p_seq (at most 4 MiB) of a blob of p_size bytes in p_chunks chunks, with the '
    'blob''s row; idempotent, and renews a blob stored before. 22023 for a chunk number out of range.';

COMMENT ON FUNCTION shell.put_blobs(text[], bytea[]) IS
    'Executor: stores small blobs (one chunk of at most 4 MiB each) in one call, each checked against the '
    'SHA-256 given for it; idempotent, and renews blobs stored before. 22023 for arrays of unequal length, '
    'a wrong hash or a blob too large.';

COMMENT ON FUNCTION shell.blob_chunk(text, integer) IS
    'Executor (restoring files) and administrator (audit verify --files): chunk p_seq of a blob, or NULL.';

COMMENT ON FUNCTION shell.put_trees(jsonb) IS
    'Executor: stores trees (a JSON array of entry arrays, children before parents) with shell.put_tree and '
    'returns their hashes in order. 22023 for an entry that refers to nothing stored.';

COMMENT ON FUNCTION shell.tree_listing(text) IS
    'Executor: every entry below a root, as paths relative to the home, parents first: the whole tree, to '
    'restore a session''s files.';

COMMENT ON FUNCTION shell.tree_diff(text, text) IS
    'Executor: what differs between two roots, one row per added, deleted or modified path, parents first; '
    'subtrees with equal hashes are never entered.';

COMMENT ON FUNCTION shell.command_terminal(bigint, text, integer) IS
    'Executor: what a command with input runs with: {tty, cols, rows, idle_s, max_s} (the user''s terminal '
    'limits), or NULL for a command without input. PS001 when the lease is lost.';

COMMENT ON FUNCTION shell.pending_input(bigint, text, integer, integer) IS
    'Executor: up to 256 input rows after p_after_seq, to deliver, with the bytes of redacted ones (from '
    'shell.secret_input). PS001 when the lease is lost.';

COMMENT ON FUNCTION shell.input_delivered(bigint, text, integer, integer, integer[]) IS
    'Executor: input up to p_upto_seq reached the program, and its secret bytes are deleted; the rows in '
    'p_hidden were delivered with echo off and become redacted. PS001 when the lease is lost.';

COMMENT ON FUNCTION shell.terminal_echo(bigint, text, integer, boolean) IS
    'Executor: records the terminal''s echo as the program set it; input sent while it is off is stored '
    'redacted. PS001 when the lease is lost.';

COMMENT ON FUNCTION shell.seal_input(bigint, text, integer) IS
    'Executor, when the program is over: closes the command''s input, drops its secret bytes and returns '
    'every input row (data by hash) for the result record''s input_sha256. PS001 when the lease is lost.';

-- Administrators (role shell_admin): users, audit, retention, usage, images.

COMMENT ON FUNCTION shell.create_user(text, text) IS
    'Administrator (pg-shell user add): creates a tenant with a bcrypt hash of the password and returns its '
    'id. 22023 for an invalid username or a password under 8 characters, 23505 when the user exists.';

COMMENT ON FUNCTION shell.set_user_quota(text, integer, integer, integer, integer, integer, integer, integer,
    integer, integer, integer, integer) IS
    'Administrator (pg-shell user quota): sets a user''s quotas and terminal limits (NULL keeps one; output '
    'and files in MiB) and returns them all. 22023 for a negative quota, a terminal limit under 1 or an '
    'unknown user.';

COMMENT ON FUNCTION shell.jwt_secret() IS
    'The secret JWTs are signed and verified with: for the gateway (shell_authenticator) and administrators '
    '(pg-shell db jwt-secret).';

COMMENT ON FUNCTION shell.audit_history(uuid) IS
    'Administrator (pg-shell audit verify, export): every ended or chained command, of one session or all, '
    'in chain order per session, with its record, signature and the row fields the record is checked '
    'against.';

COMMENT ON FUNCTION shell.audit_sessions(uuid) IS
    'Administrator (audit): each session''s chain head and retention checkpoint, for sessions with a chain.';

COMMENT ON FUNCTION shell.audit_keys() IS
    'Administrator (audit): every registered signing key, oldest first.';

COMMENT ON FUNCTION shell.audit_trees(text[]) IS
    'Administrator (pg-shell audit verify --files): the stored trees among p_hashes, with their size and '
    'entries as JSON (the keys of shell.tree_hash), to recompute their hashes.';

COMMENT ON FUNCTION shell.audit_blobs(text[]) IS
    'Administrator (audit verify --files): the stored blobs among p_sha256, with size, number of chunks and '
    'the chunk numbers present (read each with shell.blob_chunk).';

COMMENT ON FUNCTION shell.retention_sessions(timestamptz, uuid, integer) IS
    'Administrator (pg-shell cleanup): up to p_limit sessions after the id p_after that have chained '
    'commands which ended before p_before.';

COMMENT ON FUNCTION shell.retention_plan(uuid, timestamptz, integer) IS
    'Administrator (cleanup): what one retention batch removes from a session (up to p_limit unpinned ended '
    'links, oldest first, of the chain''s prefix that ended before p_before) and the checkpoint that '
    'results; locks the lane for apply_retention. 22023 for p_limit outside 1-100000.';

COMMENT ON FUNCTION shell.apply_retention(uuid, bigint[], bigint, text, bigint, text, text, text) IS
    'Administrator (cleanup): removes the planned commands with their output and saves the session''s '
    'checkpoint and its signed record; returns the commands removed. 22023 when the record does not match '
    'or no registered key signed it, or a command is not an ended link up to the checkpoint.';

COMMENT ON FUNCTION shell.idle_sessions(uuid[], timestamptz) IS
    'Administrator (cleanup): of these sessions, those with nothing queued or running and no activity since '
    'p_idle_before (their volumes may go).';

COMMENT ON FUNCTION shell.collect_files(interval) IS
    'Administrator (cleanup): deletes the trees and blobs older than p_grace that nothing kept reaches (no '
    'session''s or command''s root, no upload, no tree within the grace); returns how many of each.';

COMMENT ON FUNCTION shell.collect_upload_parts() IS
    'Administrator (cleanup): removes every user''s abandoned uploads (newest part older than '
    'upload_stale_after_s); returns the parts removed.';

COMMENT ON FUNCTION shell.usage_report(text, timestamptz) IS
    'Administrator (pg-shell usage): per-user commands, run time and output bytes of the commands that '
    'ended since the consumer''s watermark (at first since p_since), moving it past them in the same '
    'transaction. 22023 for a bad consumer name or a future p_since.';

COMMENT ON FUNCTION shell.promote_image(text) IS
    'Administrator (pg-shell image promote): makes an image (sha256: and 64 hex digits) the current one; '
    'returns it with the one it replaced. 22023 for a malformed digest.';

COMMENT ON FUNCTION shell.image_usage() IS
    'Administrator (pg-shell image list, prune): every image promoted or used by a kept command, with how '
    'many commands, last use and whether it is current. Scans the history.';

COMMENT ON FUNCTION shell.request_slot() IS
    'PostgREST''s db-pre-request: a signed-in user''s request takes one of request_slots_per_user slots for '
    'its transaction, and one beyond them is answered 429 at once. Anonymous requests pass.';

-- Helpers the tenant's invoker functions and policies call (EXECUTE granted to shell_user).

COMMENT ON FUNCTION shell.current_user_id() IS
    'The signed-in tenant: the subject of request.jwt.claims, for role shell_user and an existing user; '
    '42501 otherwise. Policies and API functions call it.';

COMMENT ON FUNCTION shell.session_not_found() IS
    'Raises session not found (22023), the same for a missing session and another tenant''s.';

COMMENT ON FUNCTION shell.command_not_found() IS
    'Raises command not found (22023), the same for a missing command and another tenant''s.';

COMMENT ON FUNCTION shell.check_page(bigint, integer) IS
    'Checks a page''s cursor (0 or more) and limit (1-1000); 22023 otherwise.';

COMMENT ON FUNCTION shell.output_of(shell.commands) IS
    'A command''s output: the output column when set (output never streamed), else its chunks joined.';

COMMENT ON FUNCTION shell.listing_budget() IS
    'Bytes of output and command text one listing may carry: config listing_budget_bytes, else 3 MiB.';

COMMENT ON FUNCTION shell.check_output_limit(integer) IS
    'Checks a listing''s p_output_limit (0 to the listing budget); 22023 otherwise.';

COMMENT ON FUNCTION shell.utf8_slice(text, bigint, bigint) IS
    'Bytes [p_from, p_from + p_limit) of a text''s UTF-8, the end moved back to a character boundary (but '
    'never below one character); 22023 for a start inside a character.';

COMMENT ON FUNCTION shell.output_piece(shell.commands, bigint, bigint, bigint) IS
    'At most p_limit bytes of a command''s output from byte p_from (or, given p_seen_change, from where it '
    'stood at that change), with the piece''s start and the output''s size; reads only the chunks it '
    'overlaps.';

COMMENT ON FUNCTION shell.latest_page(uuid, bigint, integer, bigint) IS
    'The commands of a latest_output page, oldest first. 22023 for a bad cursor or limit, or an unknown '
    'session.';

COMMENT ON FUNCTION shell.changes_page(uuid, bigint, integer) IS
    'The commands of a session_changes page, oldest first, and the cursor clamped to the session''s newest '
    'change. 22023 for a bad cursor or limit, or an unknown session.';

COMMENT ON FUNCTION shell.listing(shell.commands[], integer, bigint) IS
    'A listing''s rows: the commands given, each with a piece of its output within p_output_limit and the '
    'listing budget, which the newest get first; a row past the budget has no output and at most 1 KiB of '
    'its command.';

COMMENT ON FUNCTION shell.render_listing(shell.listing_row[]) IS
    'Listing rows as the terminal page''s HTML (shell.render_piece each), held to the listing budget: an '
    'article too large for what is left is shown without output.';

COMMENT ON FUNCTION shell.render_piece(shell.listing_row) IS
    'One listing row as HTML: render_command with the piece as output, in the colours the 64 KiB before it '
    'left, its <pre> marked with data-from, data-end and data-bytes, and a marker after a cut output.';

COMMENT ON FUNCTION shell.render_command(shell.commands) IS
    'One command as the terminal page''s HTML article: prompt, command, buttons, coloured output, outcome '
    'in words and file changes, with the data- attributes the page reads (status, change, start and time '
    'limit, cwd, terminal window).';

COMMENT ON FUNCTION shell.render_changes(shell.commands) IS
    'The file changes under a finished command in the page: a summary ("2 added, 1 modified") opening to at '
    'most 100 paths, counted up to 1000 changes; empty when nothing changed. The roots are read again from '
    'the caller''s own command.';

COMMENT ON FUNCTION shell.some_changes(bigint, integer) IS
    'At most p_limit changes (path, added/modified/deleted, kind) of one of the caller''s finished '
    'commands, shallowest first, reading no more than it returns. 22023 for an unknown command.';

COMMENT ON FUNCTION shell.html_escape(text) IS
    'A text escaped for HTML (&, <, >, and both quotes); NULL gives the empty string.';

COMMENT ON FUNCTION shell.ansi_html(text) IS
    'A text as HTML: ANSI colours as <span class="ansi-fg-31 ansi-bold">, other escapes left out, as is an '
    'escape the text stops inside. Linear time.';

COMMENT ON FUNCTION shell.ansi_scan(text, boolean) IS
    'One pass over a text: its HTML (when p_html) and its state, the escapes that continue it (the colours '
    'it leaves in force, an escape it stops inside). ansi_html and ansi_state read one each.';

COMMENT ON FUNCTION shell.ansi_state(text) IS
    'The escapes that continue a text: put before what follows, they give it the colours the text left in '
    'force and complete an escape it stops inside; empty when there are none.';

COMMENT ON FUNCTION shell.output_before(shell.commands, bigint, integer) IS
    'At most p_bytes bytes of a command''s output just before byte p_at, starting on a character; reads '
    'only the chunks that hold them.';

COMMENT ON FUNCTION shell.outcome_class(shell.commands) IS
    'ok, running, failed or cancelled: the class the page colours a command by.';

COMMENT ON FUNCTION shell.outcome_words(shell.commands, numeric) IS
    'What happened to a command in plain words, such as "exit 127: command not found · 3 ms" or "timed out: '
    'stopped at the 30 s time limit" (p_limit_s).';

COMMENT ON FUNCTION shell.short_cwd(text) IS
    'A directory as the prompt shows it: ~ for /home/sandbox, ~/d below it, others as they are.';

COMMENT ON FUNCTION shell.command_buttons(shell.commands) IS
    'The buttons beside a command in the page: cancel while it is unfinished; once it ended, fork, and '
    'replay for a command typed into this session.';

COMMENT ON FUNCTION shell.time_limit_s() IS
    'The command time limit in seconds the executors published, or NULL before any started.';

-- Internal helpers and triggers (no role calls them directly).

COMMENT ON FUNCTION shell.forbid_change() IS
    'Trigger: refuses an UPDATE of an append-only table (shell.output_chunks) with 55000.';

COMMENT ON FUNCTION shell.base64url(bytea) IS
    'Base64url without padding, as a JWT writes its parts.';

COMMENT ON FUNCTION shell.sign_jwt(jsonb) IS
    'An HS256 JWT of these claims, signed with config jwt_secret (shell_api.login).';

COMMENT ON FUNCTION shell.lock_login(text) IS
    'Waits for the other login attempts on a name to end (an advisory lock held to the end of the '
    'transaction); returns the time after the wait.';

COMMENT ON FUNCTION shell.respond(integer, text, text, integer) IS
    'Makes PostgREST answer with this HTTP status (and Retry-After) while the transaction commits; returns '
    'the error body {code, message, details, hint}.';

COMMENT ON FUNCTION shell.record_login_failure(text) IS
    'One more failed login for a name: past login_free_failures the name is closed for login_backoff_base_s '
    'doubled per failure, at most login_backoff_max_s. The caller holds shell.lock_login.';

COMMENT ON FUNCTION shell.sha256_hex(text) IS
    'The SHA-256 of a text''s UTF-8 as hex; NULL for NULL.';

COMMENT ON FUNCTION shell.utc_text(timestamptz) IS
    'A time as result records write it: UTC, ISO 8601, microseconds, ending in Z.';

COMMENT ON FUNCTION shell.result_facts(shell.commands) IS
    'The facts of an ended command that its result record vouches for (version 4: hashes of command and '
    'output, state and roots before and after, upload...). Keep in step with executor/audit/records.py.';

COMMENT ON FUNCTION shell.chain_result(bigint, text, text, text) IS
    'Appends an ended command to its session''s hash chain: with the executor''s signed record, checked '
    'against the facts (and from version 3 its chain position), or else one built here (version 4, signer '
    'database). 22023 for a record that disagrees or is not signed by a registered key.';

COMMENT ON FUNCTION shell.owned_session(uuid) IS
    'The caller''s session if it is not archived; else session not found (22023), or 42501 when nobody is '
    'signed in.';

COMMENT ON FUNCTION shell.owned_command(bigint) IS
    'The caller''s command; else command not found (22023), or 42501 when nobody is signed in.';

COMMENT ON FUNCTION shell.new_session(uuid, text, text, jsonb, bigint, uuid) IS
    'Creates a session with its lane for a user within max_sessions (unarchived ones) and returns its id; '
    'for create, fork and replay. 22023 for a name not 1-200 characters, PT429 at the quota.';

COMMENT ON FUNCTION shell.enqueue(shell.sessions, text, uuid, bigint, text, jsonb) IS
    'Queues a command on a session''s lane (the caller checked ownership) within max_queued and the stored '
    'output and files quotas (PT429); notifies shell_commands and returns the command''s id.';

COMMENT ON FUNCTION shell.check_output_quota(uuid) IS
    'PT429 when the user''s stored output has reached max_output_bytes.';

COMMENT ON FUNCTION shell.check_files_quota(uuid) IS
    'PT429 when the files the user''s kept history holds have reached max_file_bytes.';

COMMENT ON FUNCTION shell.lease_lost(bigint, text, integer, shell.commands) IS
    'Raises PS001 (lease lost) for a command the worker no longer holds, saying what was found.';

COMMENT ON FUNCTION shell.leased_command(bigint, text, integer, text[]) IS
    'Locks a command''s lane (taking its next change number), then the command, and checks that the worker '
    'holds its lease in one of p_statuses (PS001 otherwise); returns the command and the change number.';

COMMENT ON FUNCTION shell.held_command(bigint, text, integer) IS
    'The command as the worker holds it (claimed or running under its lease), the lane untouched; PS001 '
    'otherwise.';

COMMENT ON FUNCTION shell.check_worker(text, integer) IS
    'Checks a worker id (1-200 of A-Z a-z 0-9 _ . : @ -) and a lease of 1-3600 s; 22023 otherwise.';

COMMENT ON FUNCTION shell.release_command(shell.commands, boolean, text, boolean) IS
    'Takes a command back from its worker: one whose container never started is queued again (up to 5 '
    'attempts), else it fails with p_reason. Returns the new status, or the current one when it was settled '
    'or renewed meanwhile.';

COMMENT ON FUNCTION shell.notify_change() IS
    'Trigger on shell.lanes: notifies shell_changes with the session id when its change number moves, '
    'unless shell.quiet is on (output appended quietly).';

COMMENT ON FUNCTION shell.announce_session() IS
    'Trigger on new lanes: notifies shell_sessions with the new session''s id, for a warm start.';

COMMENT ON FUNCTION shell.is_pinned(bigint) IS
    'Whether retention keeps a command because a session was forked from it or a command replays it.';

COMMENT ON FUNCTION shell.tree_hash(jsonb) IS
    'A tree''s hash from its entries (a JSON array of objects with the keys of shell.tree_entries), the '
    'bytes executor/workspace/tree.py hashes too.';

COMMENT ON FUNCTION shell.empty_tree() IS
    'The hash of the empty tree: a new session''s root.';

COMMENT ON FUNCTION shell.put_tree(jsonb) IS
    'Stores one tree whose blobs and subtrees are stored and returns its hash; idempotent, and renews a '
    'tree stored before. 22023 for an entry that refers to nothing stored.';

COMMENT ON FUNCTION shell.blob_content(text) IS
    'A blob''s bytes, its chunks joined; empty when it is not stored.';

COMMENT ON FUNCTION shell.path_parts(text) IS
    'A tenant''s path (relative to the home, at most 4096 bytes and 256 parts of at most 255 bytes, no '
    'empty, . or .. part) split into its parts; 22023 otherwise.';

COMMENT ON FUNCTION shell.tree_entry(text, text[]) IS
    'The entry at a path below a root, walked one name at a time without following symlinks, or NULL.';

COMMENT ON FUNCTION shell.tree_put_path(text, text[], jsonb) IS
    'The root after putting p_entry (NULL deletes) at a path below p_root, making directories on the way. '
    '22023 when a directory is in the way or a parent is no directory.';

COMMENT ON FUNCTION shell.tree_page(text, text, integer) IS
    'Up to p_limit (1-1000) entries below a root after the path p_after, each directory followed by what it '
    'holds, names in byte order; one index probe per row. 22023 for a bad limit or path.';

COMMENT ON FUNCTION shell.root_at(uuid, bigint) IS
    'The root of the caller''s session now, or right after its command p_command_id. 22023 for an unknown '
    'session or command, or one not finished.';

COMMENT ON FUNCTION shell.file_entry(uuid, text, bigint) IS
    'The entry of the file at p_path of the caller''s session (now, or after p_command_id). 22023 for a bad '
    'path, no such file, or not a regular file.';

COMMENT ON FUNCTION shell.blob_corrupted(text) IS
    'Raises XX001 for a blob whose bytes do not match its hash: nothing may serve them.';

COMMENT ON FUNCTION shell.put_file(shell.sessions, text, jsonb) IS
    'The root after putting an upload''s file ({path, sha256, size, mode}) into p_root, within the user''s '
    'files quota and caps (PT413 with shell.files_refusal''s reason); 22023 for a bad path. Every upload '
    'comes here.';

COMMENT ON FUNCTION shell.commit_upload(uuid, text, text, bigint, integer) IS
    'The end of every upload: a stored blob becomes the file at p_path of the caller''s idle session, as a '
    'chained history entry whose id it returns. 22023 for a bad path or mode or an unstored blob, PT409 for '
    'a busy session or files not in the database yet, PT429 over max_uploads_per_minute, PT413 over the '
    'files quota or caps.';

COMMENT ON FUNCTION shell.drop_stale_uploads(uuid) IS
    'Removes the uploads of a user (of everyone for NULL) whose newest part is older than '
    'upload_stale_after_s; returns the parts removed.';

COMMENT ON FUNCTION shell.user_file_bytes(uuid) IS
    'The bytes the user''s kept history holds as shell.file_usage counts them: what the files quota is '
    'checked against.';

COMMENT ON FUNCTION shell.file_bytes_walked(uuid) IS
    'The same bytes as shell.user_file_bytes, counted by walking the user''s kept history: to check the '
    'count (tests, a superuser), never on a tenant''s path.';

COMMENT ON FUNCTION shell.files_refusal(uuid, text, text) IS
    'Why the user may not keep p_new_root in place of p_old_root (max_tree_entries, max_root_entries, '
    'max_file_bytes), or NULL; locks the user''s file usage until the transaction ends.';

COMMENT ON FUNCTION shell.count_tree_entries() IS
    'Trigger on shell.tree_entries (per statement): sets each new tree''s entries (all below it) and widest '
    '(its largest directory).';

COMMENT ON FUNCTION shell.entry_bytes(text, text) IS
    'What one tree entry costs in the files quota: about its row and index entries, growing with the name.';

COMMENT ON FUNCTION shell.lock_file_usage(uuid) IS
    'The user''s shell.file_usage row, made on first use and locked until the transaction ends.';

COMMENT ON FUNCTION shell.unheld_trees(uuid, text) IS
    'The trees below a root, itself included, that the user does not hold yet; the walk stops at held ones.';

COMMENT ON FUNCTION shell.holding_cost(uuid, text[]) IS
    'The bytes the user''s count grows by on coming to hold these unheld trees: their entries and the blobs '
    'they add.';

COMMENT ON FUNCTION shell.hold_root(uuid, text, bigint) IS
    'Adds (p_n > 0) or removes (p_n < 0) references of the user to a root, keeping held_trees, held_blobs '
    'and file_usage in step.';

COMMENT ON FUNCTION shell.release_root(uuid, text, bigint) IS
    'p_n fewer references of the user to a root; what nothing of theirs then refers to is let go, level by '
    'level.';

COMMENT ON FUNCTION shell.hold_command_roots() IS
    'Trigger on shell.commands: an ended command holds its root_before and root_after in its user''s files '
    'count.';

COMMENT ON FUNCTION shell.hold_session_root() IS
    'Trigger on shell.sessions: a session holds its root in its user''s files count.';

COMMENT ON FUNCTION shell.check_window(integer, integer) IS
    'Checks a terminal window size (1-1000 columns and rows); 22023 otherwise.';

COMMENT ON FUNCTION shell.add_input(shell.commands, text, text, integer, integer) IS
    'Appends an input row (data, resize or eof) to a command and notifies shell_input; data sent while echo '
    'is off is redacted, its bytes kept in shell.secret_input until delivered. Returns the row''s seq.';

COMMENT ON FUNCTION shell.input_target(bigint, boolean) IS
    'The caller''s command, locked for input, if it still takes input of this kind (a terminal for '
    'p_terminal); PT409 saying why not, 22023 for an unknown command.';

-- Tables, and the columns whose meaning is not obvious.

COMMENT ON TABLE shell.migrations IS
    'The migrations and grants pg-shell db migrate applied, with their checksums: an edited one is refused.';

COMMENT ON TABLE shell.config IS
    'Settings the database reads: jwt_secret, jwt_ttl_seconds, login back-off, upload limits, request '
    'slots, listing_budget_bytes, the published command_time_limit_s.';

COMMENT ON TABLE shell.users IS
    'Tenants: username, bcrypt password hash, and per-user quotas and terminal limits '
    '(shell.set_user_quota).';

COMMENT ON TABLE shell.sessions IS
    'A tenant''s shells: current cwd, environment and files (root), name, and where each came from (fork, '
    'replay). Archived, never deleted.';

COMMENT ON TABLE shell.lanes IS
    'One small row per session that claimers lock (SKIP LOCKED): queued count, running command, change '
    'cursor, result chain head, preferred host, warm-start request.';

COMMENT ON TABLE shell.commands IS
    'Every command and upload of a session: its lifecycle and lease, result, state before and after, '
    'terminal and input, and its link in the session''s result chain.';

COMMENT ON TABLE shell.output_chunks IS
    'Commands'' output as it arrived, in order, with when and the change that appended it. Append-only.';

COMMENT ON TABLE shell.signing_keys IS
    'Public Ed25519 keys of executors and the cleanup agent, which sign result records and checkpoints.';

COMMENT ON TABLE shell.chain_checkpoints IS
    'Where a session''s result chain resumes after retention removed its oldest links: the last removed '
    'link''s hash and how many links were removed, signed by the cleanup agent.';

COMMENT ON TABLE shell.usage_watermarks IS
    'How far each usage consumer (pg-shell usage) has read: the commands that ended before covered_until '
    'were reported to it.';

COMMENT ON TABLE shell.images IS
    'Sandbox images administrators promoted; at most one is current.';

COMMENT ON TABLE shell.blobs IS
    'Files'' contents by SHA-256, with size and number of chunks, shared by every tree that holds them.';

COMMENT ON TABLE shell.blob_chunks IS
    'The bytes of blobs, in chunks of at most 4 MiB.';

COMMENT ON TABLE shell.trees IS
    'Directories by the hash of their entries (shell.tree_hash), with their size, entries below and widest '
    'directory; a root is the tree of a session''s home.';

COMMENT ON TABLE shell.tree_entries IS
    'The entries of each tree: file, dir or symlink, with mode, size and the blob or tree they point to.';

COMMENT ON TABLE shell.login_failures IS
    'Failed logins per username for the back-off: closed_until is when the name may try again.';

COMMENT ON TABLE shell.file_usage IS
    'Per user: the bytes of the files their kept history holds (the files quota) and their upload window; '
    'its row lock serializes the checks.';

COMMENT ON TABLE shell.held_trees IS
    'Per user: the distinct trees their kept history holds, with reference counts and their entries'' cost.';

COMMENT ON TABLE shell.held_blobs IS
    'Per user: the distinct blobs their kept history holds, with reference counts and sizes.';

COMMENT ON TABLE shell.upload_parts IS
    'Staged parts of uploads in progress (shell_api.upload_part), per user and upload id, until '
    'upload_finish or they go stale.';

COMMENT ON COLUMN shell.sessions.root IS
    'Tree hash of the session''s files; NULL for a session from before the workspace, whose files are on a '
    'host until its next command imports them.';

COMMENT ON COLUMN shell.lanes.change_seq IS
    'Bumped under this row''s lock by every change to the session''s commands: the session''s change cursor.';

COMMENT ON COLUMN shell.lanes.cached_on IS
    'The executor host whose copy holds the session''s current files: claiming prefers it.';

COMMENT ON COLUMN shell.lanes.warm_wanted IS
    'A warm start is asked for and no executor has taken it yet (shell.adopt_session).';

COMMENT ON COLUMN shell.commands.change_seq IS
    'The session''s change number at the command''s last change: what session_changes pages by.';

COMMENT ON COLUMN shell.commands.output IS
    'Output stored whole, for entries that never streamed (uploads, commands cancelled before running); '
    'otherwise NULL and the output is in shell.output_chunks.';

COMMENT ON COLUMN shell.commands.upload IS
    'For an upload''s history entry, {path, sha256, size, mode}: applied by the database, never run.';

COMMENT ON COLUMN shell.commands.echo_off IS
    'The terminal''s echo as the executor last saw it: input sent while it is off is stored redacted.';

COMMENT ON COLUMN shell.trees.entries IS
    'All entries below the tree, each path once.';

COMMENT ON COLUMN shell.trees.widest IS
    'The most entries of one directory at or below the tree.';

COMMENT ON COLUMN shell.output_chunks.change_seq IS
    'The lane change that appended the chunk, so the live feed sends only output after a cursor.';
