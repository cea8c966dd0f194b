"""SQLSTATE → HTTP status: PostgREST's table, so an error means the same
through PostgREST and through `pg-shell serve`."""

from __future__ import annotations

import pytest

from executor.gateway.status import http_status


@pytest.mark.parametrize(("sqlstate", "status"), [
    ("22023", 400), ("22P02", 400), ("22001", 400), ("P0001", 400),  # the client's mistakes
    ("23505", 409), ("23503", 409),  # conflicts
    ("28P01", 403), ("28000", 403),  # bad credentials
    ("0L000", 403), ("0P000", 403),
    ("42883", 404), ("42P01", 404),  # no such function / table
    ("25006", 405),  # a read-only transaction was asked to write
    ("08006", 503), ("53300", 503), ("53100", 503),  # the server, not the client
    ("54000", 500), ("55000", 500), ("55P03", 500), ("57014", 500), ("XX000", 500), ("40001", 500),
    ("P0002", 500), ("P0003", 500), ("25P02", 500), ("2D000", 500), ("39P01", 500), ("F0000", 500),
    ("42601", 400), ("42703", 400), ("23514", 400), ("23502", 400),  # everything else is 400
])
def test_sqlstates_map_as_postgrest_maps_them(sqlstate: str, status: int) -> None:
    assert http_status(sqlstate, authenticated=True) == status
    assert http_status(sqlstate, authenticated=False) == status


def test_insufficient_privilege_is_401_without_a_token_and_403_with_one() -> None:
    assert http_status("42501", authenticated=False) == 401
    assert http_status("42501", authenticated=True) == 403


@pytest.mark.parametrize(("sqlstate", "status"), [("PT429", 429), ("PT413", 413), ("PT404", 404),
                                                   ("PT200", 200), ("PT503", 503)])
def test_a_pt_sqlstate_sets_the_status_directly(sqlstate: str, status: int) -> None:
    assert http_status(sqlstate, authenticated=False) == status


def test_no_sqlstate_is_a_server_error() -> None:
    assert http_status(None, authenticated=True) == 500
    assert http_status("", authenticated=False) == 500
