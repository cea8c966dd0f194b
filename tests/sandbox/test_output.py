"""Output: streamed, capped with a marker, invalid UTF-8 replaced."""

from __future__ import annotations

ROOT = "/home/sandbox"


def test_output_is_capped_with_a_visible_marker(make_sandbox, run) -> None:
    box = make_sandbox(output_cap_bytes=1000)
    ran = run("head -c 5000 /dev/zero | tr '\\0' a; echo; echo after", box=box)
    assert ran.result.truncated is True
    assert ran.output == "a" * 1000 + "\n[pg-shell: output truncated at 1000 bytes]\n"
    assert ran.result.output_bytes == 5000 + 1 + 6
    # The state report is still found after the discarded output.
    assert ran.result.exit_code == 0
    assert ran.result.state_note is None


def test_large_output_is_drained_not_held(make_sandbox, run) -> None:
    box = make_sandbox(output_cap_bytes=4096)
    ran = run("head -c 50000000 /dev/zero; echo done >&2", box=box)
    assert ran.result.exit_code == 0
    assert ran.result.output_bytes == 50000000 + 5
    assert len(ran.output.encode()) <= 4096 + 100


def test_invalid_utf8_is_replaced_and_split_characters_survive(run) -> None:
    ran = run(r"printf 'ok \xff\xfe end\n'; printf '\xe2\x82'; sleep 0.2; printf '\xac\n'")
    assert ran.result.exit_code == 0
    assert ran.output == "ok \ufffd\ufffd end\n\u20ac\n"


def test_trailing_incomplete_sequence_becomes_replacement(run) -> None:
    ran = run(r"printf 'x\xe2\x82'")
    assert ran.output == "x\ufffd"
    assert ran.result.state_note is None
