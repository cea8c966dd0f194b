"""pg_shell: a stateless, auditable, replayable command shell backed by PostgreSQL."""
