"""The `pg-shell` command line."""
