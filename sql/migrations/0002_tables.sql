-- Settings the database itself needs (the JWT secret, token lifetime).
CREATE TABLE shell.config (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE shell.users (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    username      text NOT NULL UNIQUE
                  CHECK (username ~ '^[a-z_][a-z0-9_.-]{0,62}$'),
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    max_sessions  integer NOT NULL DEFAULT 20 CHECK (max_sessions >= 0),
    max_running   integer NOT NULL DEFAULT 2 CHECK (max_running >= 0),
    max_queued    integer NOT NULL DEFAULT 100 CHECK (max_queued >= 0)
);

CREATE TABLE shell.sessions (
    id                     uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id                uuid NOT NULL REFERENCES shell.users (id),
    name                   text CHECK (length(name) BETWEEN 1 AND 200),
    cwd                    text NOT NULL DEFAULT '/home/sandbox' CHECK (cwd LIKE '/%'),
    env                    jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(env) = 'object'),
    forked_from_command_id bigint,
    replay_of_session_id   uuid REFERENCES shell.sessions (id),
    created_at             timestamptz NOT NULL DEFAULT now(),
    last_active_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sessions_user_id ON shell.sessions (user_id, created_at);

-- The hot "lane" of a session: one small row per session that claimers lock
-- with SKIP LOCKED, so a busy or locked session never blocks anyone's scan.
-- change_seq is bumped under this row's lock by every change to one of the
-- session's commands, so it grows in commit order and a poller holding a
-- cursor never misses a change.
CREATE TABLE shell.lanes (
    session_id        uuid PRIMARY KEY REFERENCES shell.sessions (id),
    user_id           uuid NOT NULL REFERENCES shell.users (id),
    pending           integer NOT NULL DEFAULT 0 CHECK (pending >= 0),
    active_command_id bigint,
    ready_since       timestamptz,
    change_seq        bigint NOT NULL DEFAULT 0,
    -- the session's result chain: its length and last hash
    chain_seq         bigint NOT NULL DEFAULT 0,
    chain_head        text NOT NULL DEFAULT repeat('0', 64)
);
-- Only sessions with claimable work are in this index: claiming costs the
-- same however long the history is.
CREATE INDEX lanes_ready ON shell.lanes (ready_since)
    WHERE pending > 0 AND active_command_id IS NULL;

CREATE TABLE shell.commands (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id           uuid NOT NULL REFERENCES shell.sessions (id),
    user_id              uuid NOT NULL REFERENCES shell.users (id),
    command              text NOT NULL CHECK (octet_length(command) BETWEEN 1 AND 1048576),
    status               text NOT NULL DEFAULT 'pending'
                         CHECK (status IN ('pending', 'claimed', 'running', 'done', 'failed', 'cancelled')),
    submitted_at         timestamptz NOT NULL DEFAULT now(),
    claimed_at           timestamptz,
    started_at           timestamptz,
    completed_at         timestamptz,
    worker_id            text,
    attempts             integer NOT NULL DEFAULT 0,
    lease_expires_at     timestamptz,
    container_id         text,
    cancel_requested_at  timestamptz,
    exit_code            integer,
    duration_ms          integer CHECK (duration_ms >= 0),
    reason               text,
    output               text,
    output_bytes         bigint NOT NULL DEFAULT 0,
    truncated            boolean NOT NULL DEFAULT false,
    cwd_before           text,
    env_before           jsonb,
    cwd_after            text,
    env_after            jsonb,
    image_digest         text,
    replay_run_id        uuid,
    replay_of_command_id bigint REFERENCES shell.commands (id),
    change_seq           bigint NOT NULL DEFAULT 0,
    -- the command's link in its session's result chain (0004_result_chain)
    result_record        text,
    signature            text,
    key_id               text,
    chain_seq            bigint,
    chain_prev           text,
    chain_hash           text,
    CONSTRAINT commands_active_has_lease CHECK (
        status NOT IN ('claimed', 'running')
        OR (worker_id IS NOT NULL AND lease_expires_at IS NOT NULL AND claimed_at IS NOT NULL)),
    CONSTRAINT commands_running_has_started CHECK (status <> 'running' OR started_at IS NOT NULL),
    CONSTRAINT commands_terminal_is_complete CHECK (
        status NOT IN ('done', 'failed', 'cancelled') OR completed_at IS NOT NULL)
);
-- The invariant, kept by the database: at most one command of a session is
-- claimed or running.
CREATE UNIQUE INDEX commands_one_active_per_session ON shell.commands (session_id)
    WHERE status IN ('claimed', 'running');
CREATE INDEX commands_pending_head ON shell.commands (session_id, id) WHERE status = 'pending';
CREATE INDEX commands_active_lease ON shell.commands (lease_expires_at)
    WHERE status IN ('claimed', 'running');
CREATE INDEX commands_active_worker ON shell.commands (worker_id)
    WHERE status IN ('claimed', 'running');
CREATE INDEX commands_unfinished_user ON shell.commands (user_id)
    WHERE status IN ('pending', 'claimed', 'running');
CREATE INDEX commands_session_history ON shell.commands (session_id, id);
CREATE INDEX commands_session_changes ON shell.commands (session_id, change_seq);
CREATE INDEX commands_replay_run ON shell.commands (replay_run_id) WHERE replay_run_id IS NOT NULL;

ALTER TABLE shell.sessions
    ADD CONSTRAINT sessions_forked_from_fkey
    FOREIGN KEY (forked_from_command_id) REFERENCES shell.commands (id);

-- Output as it arrived: append-only, ordered by seq, timestamped so it can be
-- played back with its original timing.
CREATE TABLE shell.output_chunks (
    command_id bigint NOT NULL REFERENCES shell.commands (id),
    seq        integer NOT NULL CHECK (seq >= 0),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    data       text NOT NULL,
    PRIMARY KEY (command_id, seq)
);

CREATE FUNCTION shell.forbid_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME
        USING ERRCODE = '55000', HINT = 'Rows are removed only by retention.';
END
$$;
CREATE TRIGGER output_chunks_append_only BEFORE UPDATE ON shell.output_chunks
    FOR EACH ROW EXECUTE FUNCTION shell.forbid_change();

ALTER TABLE shell.users ENABLE ROW LEVEL SECURITY;
ALTER TABLE shell.sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE shell.lanes ENABLE ROW LEVEL SECURITY;
ALTER TABLE shell.commands ENABLE ROW LEVEL SECURITY;
ALTER TABLE shell.output_chunks ENABLE ROW LEVEL SECURITY;
ALTER TABLE shell.config ENABLE ROW LEVEL SECURITY;

-- The tamper-evident history (0004_result_chain).
CREATE TABLE shell.signing_keys (
    key_id        text PRIMARY KEY CHECK (key_id ~ '^[0-9a-f]{16}$'),
    public_key    text NOT NULL UNIQUE CHECK (public_key ~ '^[0-9a-f]{64}$'),
    worker_id     text,
    registered_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE shell.signing_keys ENABLE ROW LEVEL SECURITY;

-- Verification and retention walk a session's chain in order.
CREATE UNIQUE INDEX commands_session_chain ON shell.commands (session_id, chain_seq)
    WHERE chain_seq IS NOT NULL;

-- Where a session's chain resumes after retention removed its oldest links:
-- the hash of the last removed link, and how many links were removed in all
-- (links below chain_seq that are still present were kept on purpose: see
-- shell.retention_plan). Signed by the cleanup agent like a result record.
CREATE TABLE shell.chain_checkpoints (
    session_id uuid PRIMARY KEY REFERENCES shell.sessions (id),
    chain_seq  bigint NOT NULL CHECK (chain_seq > 0),
    chain_hash text NOT NULL,
    removed    bigint NOT NULL CHECK (removed > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    record     text NOT NULL,
    signature  text,
    key_id     text
);
ALTER TABLE shell.chain_checkpoints ENABLE ROW LEVEL SECURITY;
