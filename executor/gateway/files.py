"""Files through the gateway in parts, so that no request and no response
holds a whole file in its memory (a 64 MiB upload took the gateway from 68
to 462 MB, six downloads of 32 MiB to 981 MB):

- upload_file: the JSON body is read as it arrives (json_stream), and the
  bytes of p_content are staged a part at a time (shell_api.upload_part, one
  short transaction each); when the body ends, shell_api.upload_finish puts
  the staged file through shell_api.upload_file itself, so every check of an
  upload applies. A refused or broken upload's parts are discarded.
- read_file: read as slices (shell_api.read_file_part, one short transaction
  each, pinned to the first slice's blob) and streamed out as they come,
  raw or as JSON's hex string. The bytes are hashed on the way; the last
  slice goes out only if they match the blob's SHA-256, so a client never
  receives a complete answer of altered bytes (the response is cut short).

Each database call takes one of the user's slots (user_limits) for its own
duration only: a slow client holds no connection of the pool."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from executor.db.gateway import GatewayDatabase, RpcFunction
from executor.gateway import media
from executor.gateway.auth import Identity
from executor.gateway.json_stream import STREAMED, ArgumentReader
from executor.gateway.user_limits import UserLimits

log = logging.getLogger(__name__)
MiB = 1024 * 1024
PART_BYTES = MiB // 4  # staged and read a part at a time; the database takes up to 4 MiB
# Finishing an upload is the database's heaviest call (it assembles, hashes and
# stores up to 64 MiB at once): sixteen at once on a busy 2-core database ran
# past the statement timeout, every one of them. The gateway finishes this
# many at a time; the others wait their turn (their bodies have all arrived).
FINISHING_AT_ONCE = 2
UPLOAD = "upload_file"
DOWNLOAD = "read_file"
_JSON_HEX_START = b'"\\\\x'  # bytea in JSON: "\\x…" (PostgreSQL's hex format in a string)


@dataclass(frozen=True)
class StagedUpload:
    """p_content of an upload_file call, staged in the database under ``upload_id``."""
    upload_id: str


class DownloadBroken(Exception):
    """A streamed file's bytes did not match its hash or size: the answer is cut short."""


class PartsResponse(StreamingResponse):
    """A streamed answer that runs ``after`` once it has been sent, or has failed."""

    def __init__(self, parts: AsyncIterator[bytes], media_type: str, length: int) -> None:
        super().__init__(parts, media_type=media_type, headers={"Content-Length": str(length)})
        self.after: Callable[[], None] = lambda: None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.after()


def user_of(identity: Identity) -> str:
    return str((identity.claims or {}).get("sub", ""))


class Files:
    def __init__(self, db: GatewayDatabase, limits: UserLimits,
                 catalog: Callable[[], dict[str, RpcFunction]], max_value: int) -> None:
        self.db = db
        self.limits = limits
        self.catalog = catalog
        self.max_value = max_value  # bytes of JSON any other argument may take
        self._discards: set[asyncio.Task[None]] = set()
        self._finishing = asyncio.Semaphore(FINISHING_AT_ONCE)

    # -- uploads

    def streams_upload(self, request: Request, name: str) -> bool:
        """Whether this call's body is read as it arrives: upload_file, POSTed as JSON."""
        content_type = request.headers.get("content-type", "application/json")
        return (name == UPLOAD and request.method == "POST" and "upload_part" in self.catalog()
                and content_type.split(";")[0].strip() == media.JSON)

    async def receive_upload(self, request: Request, identity: Identity) -> dict[str, Any]:
        """The call's arguments, p_content staged (a StagedUpload) if it is a string."""
        upload_id = str(uuid.uuid4())
        pending = bytearray()
        reader = ArgumentReader("p_content", pending.extend, self.max_value)
        seq = 0
        try:
            async for piece in request.stream():
                reader.feed(piece)
                while len(pending) >= PART_BYTES:
                    await self._stage(identity, upload_id, seq, bytes(pending[:PART_BYTES]))
                    del pending[:PART_BYTES]
                    seq += 1
            args = reader.close()
            if args.get("p_content") is STREAMED:
                if pending or seq == 0:  # an empty file is one empty part
                    await self._stage(identity, upload_id, seq, bytes(pending))
                    seq += 1
                args["p_content"] = StagedUpload(upload_id)
            return args
        except BaseException:
            if seq:
                self.discard(identity, args={"p_content": StagedUpload(upload_id)})
            raise

    def finishing(self, fn: RpcFunction, args: dict[str, Any]
                  ) -> tuple[RpcFunction, dict[str, Any]]:
        """The call to make for ``fn``(``args``): a staged upload is finished."""
        staged = args.get("p_content")
        if fn.name != UPLOAD or not isinstance(staged, StagedUpload):
            return fn, args
        rest = {k: v for k, v in args.items() if k != "p_content"}
        return self.catalog()["upload_finish"], {"p_upload_id": staged.upload_id, **rest}

    def finishing_turn(self, args: dict[str, Any]) -> contextlib.AbstractAsyncContextManager[Any]:
        """Held while a staged upload is finished (FINISHING_AT_ONCE); nothing otherwise."""
        if isinstance(args.get("p_content"), StagedUpload):
            return self._finishing
        return contextlib.nullcontext()

    def discard(self, identity: Identity, args: dict[str, Any]) -> None:
        """Drops a staged upload's parts in the background (also when the
        request was cancelled: its client went away)."""
        staged = args.get("p_content")
        if not isinstance(staged, StagedUpload):
            return
        fn = self.catalog()["upload_discard"]
        task = asyncio.get_running_loop().create_task(
            self._call(identity, fn, {"p_upload_id": staged.upload_id}))
        self._discards.add(task)
        task.add_done_callback(self._discarded)

    def _discarded(self, task: asyncio.Task[None]) -> None:
        self._discards.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("could not discard a staged upload: %s", task.exception())

    async def _stage(self, identity: Identity, upload_id: str, seq: int, data: bytes) -> None:
        await self._call(identity, self.catalog()["upload_part"],
                         {"p_upload_id": upload_id, "p_seq": seq, "p_data": data})

    # -- downloads

    def streams_download(self, name: str) -> bool:
        return name == DOWNLOAD and "read_file_part" in self.catalog()

    async def download(self, request: Request, args: dict[str, Any],
                       identity: Identity) -> Response:
        """read_file's answer, streamed. The first slice is read before
        answering, so a missing file is the error read_file gives."""
        first = await self._slice(identity, args, 0, None)
        sha256, size = str(first["sha256"]), int(first["size"])
        raw = media.preferred(request.headers.get("accept"), {media.OCTET_STREAM}) != media.JSON
        length = size if raw else len(_JSON_HEX_START) + 2 * size + 1
        media_type = media.OCTET_STREAM if raw else "application/json; charset=utf-8"
        if request.method == "HEAD":
            return Response(b"", media_type=media_type, headers={"Content-Length": str(length)})

        async def parts() -> AsyncIterator[bytes]:
            digest = hashlib.sha256()
            pending = bytes(first["data"])
            offset = len(pending)
            yield b"" if raw else _JSON_HEX_START
            while offset < size and pending:
                following = bytes((await self._slice(identity, args, offset, sha256))["data"])
                digest.update(pending)
                yield pending if raw else pending.hex().encode()
                pending = following
                offset += len(following)
            digest.update(pending)
            if offset != size or digest.hexdigest() != sha256:
                log.error("read_file of %s in session %s: the stored bytes do not match their "
                          "hash %s; the answer is cut short", args.get("p_path"),
                          args.get("p_session_id"), sha256)
                raise DownloadBroken(f"the stored file does not match its hash ({sha256})")
            yield pending if raw else pending.hex().encode() + b'"'
        return PartsResponse(parts(), media_type, length)

    async def _slice(self, identity: Identity, args: dict[str, Any], offset: int,
                     sha256: str | None) -> dict[str, Any]:
        rows = await self._call(identity, self.catalog()["read_file_part"],
                                {**args, "p_offset": offset, "p_length": PART_BYTES,
                                 "p_sha256": sha256})
        return dict(rows[0])

    # -- the database, one slot of the user's at a time

    async def _call(self, identity: Identity, fn: RpcFunction, args: dict[str, Any]) -> Any:
        async with self.limits.db_slot(user_of(identity)):
            return await run_in_threadpool(self.db.call_function, fn, args, identity.role,
                                           identity.claims)

