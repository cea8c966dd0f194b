"""The executor's end of the supervisor protocol (pure): frames survive any
chunking, output is capped, control frames are parsed, bad frames refused."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executor.sandbox.output import OutputCapper
from executor.sandbox.protocol import (
    Conversation,
    FrameDecoder,
    ProtocolError,
    ScanReport,
    frame,
    json_frame,
)


def chunked(data: bytes, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, 8)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


@given(st.lists(st.binary(max_size=200), max_size=10), st.integers(0, 2**32))
def test_frames_come_out_whole_however_the_stream_is_cut(payloads: list[bytes], seed: int) -> None:
    stream = b"".join(frame(b"o", p) for p in payloads)
    decoder = FrameDecoder()
    got = [f for piece in chunked(stream, seed) for f in decoder.feed(piece)]
    assert got == [(b"o", p) for p in payloads]
    assert decoder.pending == 0


def test_an_unknown_frame_type_or_a_huge_length_is_refused() -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(b"Z\x00\x00\x00\x01x")
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(b"o\x7f\xff\xff\xff")


class Receiver:
    def __init__(self, max_entries: int | None = None) -> None:
        self.max_entries = max_entries
        self.known: dict[str, str] = {}
        self.expected_bytes = 0
        self.asked: list[list] = []
        self.scans: list[ScanReport] = []
        self.files: dict[str, bytes] = {}
        self._path = ""

    def wanted(self, manifest: list[list], scan: ScanReport) -> list[str]:
        self.asked.append(list(manifest))
        self.scans.append(scan)
        return [e[0] for e in manifest if len(e) == 7 and e[1] == "file"]

    def begin(self, path: str) -> None:
        self._path = path
        self.files[path] = b""

    def data(self, chunk: bytes) -> None:
        self.files[self._path] += chunk

    def end(self, ok: bool, error: str | None) -> None:
        assert ok, error


def test_a_whole_conversation() -> None:
    replies: list[bytes] = []
    receiver = Receiver()
    talk = Conversation(OutputCapper(5), receiver, replies.append)
    manifest = [["d", "dir", 0o755, 0, 1, 2, None], ["d/f", "file", 0o644, 3, 3, 4, None]]
    stream = (frame(b"o", b"hello world") + frame(b"s", b"/home/sandbox\0A=1\0")
              + json_frame(b"x", {"status": 3}) + json_frame(b"m", manifest)
              + json_frame(b"M", {"entries": 2, "skipped": [["p", "fifo"]]})
              + json_frame(b"f", {"path": "d/f"}) + frame(b"d", b"abc")
              + json_frame(b"F", {"ok": True}) + frame(b"e"))
    out = "".join(talk.feed(piece) for piece in chunked(stream, 7))
    assert out.startswith("hello") and talk.capper.truncated
    assert (talk.state, talk.status, talk.ended) == (b"/home/sandbox\0A=1\0", 3, True)
    assert receiver.asked == [manifest] and talk.skipped == [["p", "fifo"]]
    assert talk.manifest == []  # handed over: the receiver keeps what it needs
    assert replies == [json_frame(b"q", {"paths": ["d/f"]})]
    assert receiver.files == {"d/f": b"abc"}


@pytest.mark.parametrize(("report", "oom"), [
    ({"status": 137, "oom": True}, True), ({"status": 137, "oom": False}, False),
    ({"status": 137}, None), ({"status": 137, "oom": "yes"}, None)])
def test_the_supervisors_oom_count_is_taken_only_as_a_boolean(report: dict, oom: bool | None,
                                                              ) -> None:
    talk = Conversation(OutputCapper(5), None, lambda _reply: None)
    talk.feed(json_frame(b"x", report))
    assert (talk.status, talk.oom) == (137, oom)


def test_a_manifest_past_the_receivers_cap_is_not_kept() -> None:
    receiver = Receiver(max_entries=3)
    talk = Conversation(OutputCapper(5), receiver, lambda _reply: None)
    entry = ["f", "file", 0o644, 0, 1, 2, None]
    for _ in range(4):
        talk.feed(json_frame(b"m", [entry, entry]))
    talk.feed(json_frame(b"M", {"entries": 8, "skipped": [["p", "fifo"]] * 500,
                                "skipped_more": 7, "failed": ["deep", "cannot list: x"]}))
    assert receiver.asked == [[entry] * 3]
    scan = receiver.scans[0]
    assert (scan.entries, scan.over, scan.failed, scan.skipped_more) == (
        8, True, ["deep", "cannot list: x"], 7)
    assert len(talk.skipped) == 100


def test_directories_found_unchanged_are_not_entries_but_are_bounded_too() -> None:
    receiver = Receiver(max_entries=2)
    receiver.known = {"": "0" * 32, "a": "1" * 32}
    talk = Conversation(OutputCapper(5), receiver, lambda _reply: None)
    entry = ["a/f", "file", 0o644, 0, 1, 2, None]
    talk.feed(json_frame(b"m", [[""], ["a"], entry, entry]))  # 2 entries: at the cap, not over
    talk.feed(json_frame(b"M", {"entries": 2}))
    assert (receiver.scans[0].entries, receiver.scans[0].over) == (2, False)
    assert receiver.asked == [[[""], ["a"], entry, entry]]
    # A scan that sends more [directory] items than the receiver knows
    # directories is cut at the cap plus what it knows.
    flood = Receiver(max_entries=2)
    flood.known = {"": "0" * 32}
    talk = Conversation(OutputCapper(5), flood, lambda _reply: None)
    talk.feed(json_frame(b"m", [["x"]] * 1000))
    talk.feed(json_frame(b"M", {"entries": 0}))
    assert len(flood.asked[0]) == 3 and not flood.scans[0].over
