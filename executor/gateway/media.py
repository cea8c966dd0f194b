"""Which representation an answer takes, from the request's Accept header,
negotiated as PostgREST negotiates: the most preferred media type (by q, then
by position) that the function can produce; `*/*` means JSON.

JSON is every function's representation; a function returning the
`"text/html"` domain can also answer raw HTML, and one returning bytea (or a
domain over it) raw bytes as `application/octet-stream`. Where PostgREST
would refuse an Accept header that names none of these (415), this front
answers JSON, so a browser's or htmx's Accept never breaks a JSON call."""

from __future__ import annotations

from collections.abc import Collection

JSON = "application/json"
HTML = "text/html"
OCTET_STREAM = "application/octet-stream"


def preferred(accept: str | None, offered: Collection[str]) -> str:
    """The first of ``offered`` (or JSON) in the Accept header's order of preference."""
    ranked: list[tuple[float, int, str]] = []
    for position, item in enumerate((accept or "").split(",")):
        media, *params = (part.strip() for part in item.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if media and quality > 0:  # q=0 means "not this one"
            ranked.append((-quality, position, media.lower()))
    for _quality, _position, media in sorted(ranked):
        if media == "*/*":
            return JSON
        if media == JSON or media in offered:
            return media
    return JSON
