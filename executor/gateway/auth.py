"""Who is calling: a verified HS256 JWT names the role and claims; no token
means the anonymous role. Anything else is refused with 401.

A verified token is remembered (as PostgREST's JWT cache does): a terminal
sends one request per keystroke with the same token, and checking its
signature each time was a tenth of the gateway's time. Its expiry is
checked on every use; a token that failed is not remembered."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import jwt

ANON_ROLE = "shell_anon"
# Roles a token may name; the authenticator can switch to no others.
TOKEN_ROLES = frozenset({"shell_user"})


class AuthError(Exception):
    """The token is missing a part, forged, expired or names a role it may not."""


@dataclass(frozen=True)
class Identity:
    role: str
    claims: dict[str, Any] | None

    @property
    def authenticated(self) -> bool:
        return self.claims is not None


def identify(authorization: str | None, secret: str) -> Identity:
    if not authorization:
        return Identity(ANON_ROLE, None)
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("the Authorization header must be 'Bearer <token>'")
    claims = _verified(token.strip(), secret)
    if claims["exp"] <= time.time():  # as jwt.decode checks it
        raise AuthError("JWT expired")
    return Identity(claims["role"], dict(claims))


@functools.lru_cache(maxsize=4096)
def _verified(token: str, secret: str) -> MappingProxyType[str, Any]:
    """The claims of a token signed with ``secret`` that names a role it may
    (read-only: one copy serves every request that sends the token)."""
    try:
        # algorithms pins HS256: "none" and key-confusion tricks are refused.
        claims = jwt.decode(token, secret, algorithms=["HS256"], options={"require": ["exp"]})
    except jwt.ExpiredSignatureError as exc:
        raise AuthError("JWT expired") from exc
    except jwt.PyJWTError as exc:
        raise AuthError(f"invalid JWT: {exc}") from exc
    role = claims.get("role")
    if role not in TOKEN_ROLES:
        raise AuthError(f"the JWT's role {role!r} is not allowed")
    if not isinstance(claims["exp"], int | float):
        raise AuthError("invalid JWT: exp is not a number")
    return MappingProxyType(claims)
