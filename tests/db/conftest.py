"""What the database tests share."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg2
import pytest


@pytest.fixture
def conn(db: str) -> Iterator[psycopg2.extensions.connection]:
    """An autocommit connection to the test's database, as its owner."""
    connection = psycopg2.connect(db)
    connection.autocommit = True
    yield connection
    connection.close()
