"""The end-to-end fixtures of tests/executor (the real `pg-shell executor`
daemon against a fresh database, tenant sessions through the SQL API),
shared here without moving them: pytest registers every fixture found in a
conftest module's namespace, imported or not."""

from tests.executor.conftest import (  # noqa: F401 - fixtures and helpers re-exported
    TERMINAL,
    Daemon,
    Shell,
    daemon,
    executor_env,
    make_daemon,
    make_shell,
    remove_session_volumes,
    shell,
)
