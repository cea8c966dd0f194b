"""`pg-shell serve`: an HTTP gateway speaking PostgREST's protocol for the
shell_api schema, plus the static UI and live updates."""
