"""The shell behaves like a shell, and cwd/env survive between commands."""

from __future__ import annotations

import hashlib

import pytest

ROOT = "/home/sandbox"


def test_pipes_globs_redirects_and_variables_work(run) -> None:
    ran = run(
        "mkdir -p g && cd g && touch a.txt b.txt c.log"
        " && echo *.txt | tr a-z A-Z > out && cat out"
        ' && X=world; echo "hello $X" && false || echo recovered'
        " && echo to-stderr >&2"
    )
    assert ran.result.exit_code == 0
    assert ran.result.reason is None
    assert ran.output == "A.TXT B.TXT\nhello world\nrecovered\nto-stderr\n"
    assert ran.result.cwd == f"{ROOT}/g"
    assert ran.result.state_note is None
    assert ran.started == [ran.result.container_id]


def test_cd_export_unset_persist_to_the_next_command(run) -> None:
    first = run(
        'mkdir -p sub/dir && cd sub/dir && export A=1 B="two words" && unset DROPME',
        env={"KEEP": "x", "DROPME": "y", "LANG": "C.UTF-8"},
    )
    assert first.result.exit_code == 0
    assert first.result.cwd == f"{ROOT}/sub/dir"
    assert first.result.env == {
        "A": "1",
        "B": "two words",
        "KEEP": "x",
        "LANG": "C.UTF-8",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "TERM": "xterm-256color",  # a default, as PATH: programs that draw need one
    }
    assert first.result.state_note is None

    second = run('pwd; echo "$A|$B|$KEEP|${DROPME-unset}"', cwd=first.result.cwd,
                 env=first.result.env)
    assert second.output == f"{ROOT}/sub/dir\n1|two words|x|unset\n"


def test_exit_n_still_reports_state(run) -> None:
    ran = run("mkdir -p e && cd e && export Z=1; echo bye; exit 3")
    assert ran.result.exit_code == 3
    assert ran.result.reason is None
    assert ran.output == "bye\n"
    assert ran.result.cwd == f"{ROOT}/e"
    assert ran.result.env["Z"] == "1"
    assert ran.result.state_note is None


def test_redirecting_stdout_away_does_not_lose_state(run) -> None:
    ran = run("exec >/dev/null; mkdir -p q; cd q; export Q=1; echo hidden")
    assert ran.output == ""
    assert ran.result.cwd == f"{ROOT}/q"
    assert ran.result.env["Q"] == "1"


@pytest.mark.parametrize(
    ("command", "code"),
    [("true", 0), ("false", 1), ("exit 42", 42), ("(exit 7)", 7), ("no-such-cmd", 127),
     ("if then", 2)],
)
def test_exit_status_is_the_commands(run, command: str, code: int) -> None:
    ran = run(command)
    assert ran.result.exit_code == code
    assert ran.result.reason is None
    assert ran.result.state_note is None


def test_a_pipe_whose_reader_ends_early_ends_its_writer_quietly(run) -> None:
    # As in any shell: SIGPIPE ends the writer, no "Broken pipe" error.
    ran = run("yes | head -n 2; seq 1000000 | head -n 1")
    assert (ran.output, ran.result.exit_code) == ("y\ny\n1\n", 0)
    assert run("yes | head -n 1; echo ${PIPESTATUS[0]}").output == "y\n141\n"


def test_missing_cwd_falls_back_to_root_with_a_note(run) -> None:
    ran = run("pwd", cwd=f"{ROOT}/gone")
    assert ran.output == f"pg-shell: {ROOT}/gone is gone; starting in {ROOT}\n{ROOT}\n"
    assert ran.result.cwd == ROOT


def test_a_one_mib_command_is_delivered_intact(run) -> None:
    payload = ("0123456789abcdef" * 65536)[: 1024 * 1024]
    command = f"x='{payload}'\nprintf %s \"$x\" | sha256sum; echo ${{#x}}"
    assert len(command.encode()) > 1024 * 1024
    ran = run(command)
    assert ran.result.exit_code == 0
    assert ran.output == f"{hashlib.sha256(payload.encode()).hexdigest()}  -\n{len(payload)}\n"


def test_the_command_text_arrives_as_typed(run) -> None:
    # Leading blanks, backslashes, a control character, non-ASCII and
    # trailing newlines: the shell reads the text whole, byte for byte.
    text = "  leading\\back\\\\slash \x01 é 日本\n\tTab\n"
    ran = run(f"cat <<'END'\n{text}END\n\n\n")
    assert ran.result.exit_code == 0
    assert ran.output == text


def test_reserved_and_executor_variables_are_not_stored(run) -> None:
    ran = run("export HOME=/tmp PG_SHELL_X=1 HOSTNAME=h OK=1")
    assert "OK" in ran.result.env
    dropped = {"HOME", "PG_SHELL_X", "HOSTNAME", "PWD", "OLDPWD", "SHLVL", "_"}
    assert not dropped & set(ran.result.env)
