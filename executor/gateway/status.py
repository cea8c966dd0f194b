"""SQLSTATE → HTTP status, exactly as PostgREST maps them, so an error means
the same through either front."""

from __future__ import annotations

_BY_CLASS = {
    "08": 503, "09": 500, "0L": 403, "0P": 403, "22": 400, "25": 500, "28": 403,
    "2D": 500, "38": 500, "39": 500, "3B": 500, "40": 500, "53": 503, "54": 500,
    "55": 500, "57": 500, "58": 500, "F0": 500, "HV": 500, "P0": 500, "XX": 500,
}
_BY_CODE = {
    "23503": 409, "23505": 409, "25006": 405, "P0001": 400,
    "42883": 404, "42P01": 404,
}


def http_status(sqlstate: str | None, authenticated: bool) -> int:
    if not sqlstate:
        return 500
    if sqlstate == "42501":
        return 403 if authenticated else 401
    if sqlstate.startswith("PT") and sqlstate[2:].isdigit():
        return int(sqlstate[2:])
    if sqlstate in _BY_CODE:
        return _BY_CODE[sqlstate]
    return _BY_CLASS.get(sqlstate[:2], 400)


def hinted_retry_after(sqlstate: str | None, hint: str | None) -> str | None:
    """Retry-After for a PT429 the database raised, from the seconds its hint
    names ("Try again in 1 second."), so clients back off as they do for
    the gateway's own 429s."""
    import re

    found = re.search(r"\bin (\d+) seconds?\b", hint or "") if sqlstate == "PT429" else None
    return found.group(1) if found else None
