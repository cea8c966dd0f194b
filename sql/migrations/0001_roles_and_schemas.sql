-- Roles are cluster-wide, so they are created only when missing: several
-- databases (tests, staging) may share one cluster.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['shell_anon', 'shell_user', 'shell_executor', 'shell_admin'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
    -- The gateway (or PostgREST) logs in as the authenticator and switches to
    -- the role named in the JWT; NOINHERIT so it holds no rights of its own.
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'shell_authenticator') THEN
        CREATE ROLE shell_authenticator LOGIN NOINHERIT;
    END IF;
END
$$;

-- Schema shell (and its migrations table) is created by the migration runner.
CREATE SCHEMA shell_api;

-- Functions are executable by nobody until sql/grants.sql says otherwise.
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

CREATE EXTENSION pgcrypto WITH SCHEMA shell;
