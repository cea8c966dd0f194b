"""The gateway's token check: a verified token is remembered, and its
expiry is still checked on every use."""

from __future__ import annotations

import time

import jwt
import pytest

from executor.gateway import auth

SECRET = "s" * 32


def bearer(claims: dict[str, object], secret: str = SECRET) -> str:
    return "Bearer " + jwt.encode(claims, secret, algorithm="HS256")


def test_a_remembered_token_still_expires(monkeypatch):
    exp = int(time.time()) + 60
    header = bearer({"role": "shell_user", "sub": "alice", "exp": exp})
    assert auth.identify(header, SECRET).claims == {"role": "shell_user", "sub": "alice",
                                                    "exp": exp}
    monkeypatch.setattr(auth.time, "time", lambda: exp)
    with pytest.raises(auth.AuthError, match="JWT expired"):
        auth.identify(header, SECRET)


def test_a_token_is_checked_against_the_secret_it_is_used_with():
    header = bearer({"role": "shell_user", "exp": int(time.time()) + 60})
    assert auth.identify(header, SECRET).authenticated
    with pytest.raises(auth.AuthError, match="invalid JWT"):
        auth.identify(header, "t" * 32)


def test_each_caller_gets_its_own_claims():
    header = bearer({"role": "shell_user", "exp": int(time.time()) + 60})
    auth.identify(header, SECRET).claims["role"] = "postgres"  # type: ignore[index]
    assert auth.identify(header, SECRET).role == "shell_user"
    assert auth.identify(header, SECRET).claims["role"] == "shell_user"  # type: ignore[index]


@pytest.mark.parametrize("claims, problem", [
    ({"role": "postgres", "exp": 2**40}, "role 'postgres' is not allowed"),
    ({"role": "shell_user"}, "invalid JWT"),
    ({"role": "shell_user", "exp": "2000000000"}, "exp is not a number"),
])
def test_refused_tokens(claims, problem):
    with pytest.raises(auth.AuthError, match=problem):
        auth.identify(bearer(claims), SECRET)
