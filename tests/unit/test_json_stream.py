"""The upload body read as it arrives (executor/gateway/json_stream.py): cut
anywhere, it gives the arguments json.loads gives and the bytes PostgreSQL's
bytea input gives, and refuses what either refuses."""

from __future__ import annotations

import asyncio
import json
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from executor.gateway.json_stream import STREAMED, ArgumentReader, ByteaError, NulInText
from executor.gateway.user_limits import UserLimits


def read(body: bytes, cuts: list[int]) -> tuple[dict[str, object], bytes]:
    out = bytearray()
    reader = ArgumentReader("p_content", out.extend, 1 << 20)
    previous = 0
    for cut in [*sorted(cuts), len(body)]:
        reader.feed(body[previous:cut])
        previous = cut
    return reader.close(), bytes(out)


def escape_format(data: bytes) -> str:
    return "".join("\\\\" if b == 92 else chr(b) if 32 <= b < 127 else f"\\{b:03o}"
                   for b in data)


@pytest.mark.parametrize("seed", range(40))
def test_any_cut_of_any_body_reads_as_a_whole_one(seed: int) -> None:
    rng = random.Random(seed)
    data = rng.randbytes(rng.randint(0, 200))
    text = rng.choice([
        "\\x" + data.hex(),
        "\\x" + " ".join(data.hex()[i:i + 2] for i in range(0, 2 * len(data), 2)),
        "\\x" + data.hex().upper(),
        escape_format(data),
    ])
    args = {"p_session_id": "5e1f…", "p_path": 'a/"b\\', "p_content": text, "p_mode": 420,
            "p_other": {"nested": ["}", 1, None]}}
    keys = list(args)
    rng.shuffle(keys)
    body = json.dumps({k: args[k] for k in keys}, ensure_ascii=rng.random() < 0.5).encode()
    cuts = rng.sample(range(1, len(body)), min(len(body) - 1, rng.randint(0, 40)))
    assert read(body, cuts) == ({**args, "p_content": STREAMED}, data)


def test_json_escapes_in_the_content_are_decoded_across_cuts() -> None:
    # \u005c is the backslash of "\x": hex digits follow, and é is not one.
    hex_body = b'{"p_content": "\\u005cx41\\u00e9"}'
    for cut in range(1, len(hex_body)):
        with pytest.raises(ByteaError, match='invalid hexadecimal digit: "\u00e9"'):
            read(hex_body, [cut])
    escaped = b'{"p_content": "a\\u00e9\\ud83d\\ude00\\\\\\\\\\n"}'
    for cut in range(1, len(escaped)):
        assert read(escaped, [cut])[1] == "a\u00e9\U0001f600\\\n".encode()


@pytest.mark.parametrize(("content", "sqlstate", "message"), [
    ("\\x0g", "22023", 'invalid hexadecimal digit: "g"'),
    ("\\x0", "22023", "invalid hexadecimal data: odd number of digits"),
    ("\\x0 1", "22023", 'invalid hexadecimal digit: " "'),
    ("\\x\f01", "22023", 'invalid hexadecimal digit: "\f"'),
    ("a\\b", "22P02", "invalid input syntax for type bytea"),
    ("a\\", "22P02", "invalid input syntax for type bytea"),
    ("\\400", "22P02", "invalid input syntax for type bytea"),
])
def test_bytea_postgresql_refuses_is_refused_with_its_words(
        content: str, sqlstate: str, message: str) -> None:
    body = json.dumps({"p_content": content}).encode()
    for cut in range(1, len(body)):
        with pytest.raises(ByteaError) as refused:
            read(body, [cut])
        assert (refused.value.sqlstate, str(refused.value)) == (sqlstate, message)


@pytest.mark.parametrize("body", [b"[1]", b'{"a": 1', b'{"a": 1,}', b'{"a" 1}', b"{} x",
                                  b'{"p_content": "\\x00", "p_content": "\\x01"}',
                                  b'{"a": ' + b"[" * 65 + b"]" * 65 + b"}"])
def test_malformed_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        read(body, [len(body) // 2])


def test_a_nul_in_the_content_is_refused_as_postgresql_refuses_it() -> None:
    with pytest.raises(NulInText):
        read(b'{"p_content": "a\\u0000"}', [])


def test_other_arguments_are_bounded() -> None:
    out = bytearray()
    reader = ArgumentReader("p_content", out.extend, 1000)
    with pytest.raises(ValueError, match="longer than 1000 bytes"):
        reader.feed(b'{"p_path": "' + b"a" * 2000)


def test_a_user_beyond_her_requests_is_refused_and_her_slots_are_hers() -> None:
    limits = UserLimits(requests_per_user=2, db_slots_per_user=1)
    assert limits.enter("alice") and limits.enter("alice")
    assert not limits.enter("alice")
    assert limits.enter("bob")
    limits.leave("alice")
    assert limits.enter("alice")

    async def scenario() -> list[str]:
        order: list[str] = []
        held = asyncio.Event()

        async def alice_first() -> None:
            async with limits.db_slot("alice"):
                order.append("alice 1")
                held.set()
                await asyncio.sleep(0.05)
                order.append("alice 1 done")

        async def alice_second() -> None:
            await held.wait()
            async with limits.db_slot("alice"):
                order.append("alice 2")

        async def bob() -> None:
            await held.wait()
            async with limits.db_slot("bob"):
                order.append("bob")
        await asyncio.gather(alice_first(), alice_second(), bob())
        return order
    # A loop of its own in a thread of its own: an earlier test in this
    # process (Playwright's sync API) may have left one running here.
    with ThreadPoolExecutor(1) as thread:
        order = thread.submit(asyncio.run, scenario()).result()
    # Bob is not kept waiting by Alice's slot; Alice's second call waits for her first.
    assert order.index("bob") < order.index("alice 1 done") < order.index("alice 2")
    assert limits._slots == {}
