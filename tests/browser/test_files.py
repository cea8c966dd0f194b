"""The session's files on the page, in a real headless Chromium against the
real gateway, executor daemon, Docker engine and PostgreSQL: what each
command changed, the files panel, downloads and uploads."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.browser.stack import Terminal

OpenTerminal = Callable[..., Terminal]
HOSTILE = "<img src=x onerror=alert(1)>"


def csp_errors(term: Terminal) -> list[str]:
    errors: list[str] = []
    term.page.on("console",
                 lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    return errors


def open_files(term: Terminal) -> Any:
    term.page.click("#files-toggle")
    panel = term.page.locator("#files-panel")
    term.expect(panel).to_be_visible()
    term.expect(term.page.locator("#files-toggle")).to_have_attribute("aria-expanded", "true")
    return panel


def column(term: Terminal, name: str) -> Any:
    return term.page.locator(f"#files-list td.{name}")


def upload(term: Terminal, name: str, content: bytes, path: str = "") -> None:
    term.page.set_input_files("#upload-form input[type=file]",
                              files=[{"name": name, "mimeType": "application/octet-stream",
                                      "buffer": content}])
    term.page.fill("#upload-form [name=path]", path)
    term.page.click("#upload-form button[type=submit]")


def test_a_command_that_changes_files_shows_a_summary_that_opens_to_the_list(
        open_terminal: OpenTerminal, artifacts: Path) -> None:
    term = open_terminal("alice")
    term.new_session()
    created = term.run("mkdir d && echo a > d/a && echo b > b && echo c > c")
    changed = term.run("echo more >> b; rm c; echo e > e")
    nothing = term.run("echo no files")

    summary = created.locator("details.changes summary")
    term.expect(summary).to_have_text("4 added")
    items = created.locator("details.changes li")
    term.expect(items.first).to_be_hidden()
    summary.click()
    term.expect(items).to_have_text(["added b", "added c", "added d/", "added d/a"])
    term.expect(items.first).to_be_visible()

    term.expect(changed.locator("details.changes summary")).to_have_text(
        "1 added, 1 modified, 1 deleted")
    changed.locator("details.changes summary").click()
    term.expect(changed.locator("details.changes li")).to_have_text(
        ["modified b", "deleted c", "added e"])
    term.expect(nothing.locator("pre.out")).to_have_text("no files\n")
    term.expect(nothing.locator("details")).to_have_count(0)
    term.page.screenshot(path=str(artifacts / "terminal-changes.png"))

    # The same after a reload (the page's first read, not the live feed).
    term.page.reload()
    term.expect(term.commands()).to_have_count(3)
    term.expect(term.commands().locator("details.changes summary")).to_have_text(
        ["4 added", "1 added, 1 modified, 1 deleted"])


def test_the_files_panel_lists_the_files_and_a_download_returns_their_bytes(
        open_terminal: OpenTerminal, artifacts: Path) -> None:
    term = open_terminal("alice")
    errors = csp_errors(term)
    term.new_session()
    term.run(r"printf 'caf\303\251\000\001\377' > bin.dat && mkdir sub && echo hi > sub/x.txt"
             " && chmod 600 sub/x.txt && ln -s sub/x.txt link")
    open_files(term)

    term.expect(column(term, "path")).to_have_text(["bin.dat", "link → sub/x.txt", "sub/x.txt"])
    term.expect(column(term, "size")).to_have_text(["8 B", "link", "3 B"])
    term.expect(column(term, "mode")).to_have_text(["644", "777", "600"])
    # files only, not the link
    term.expect(term.page.locator("#files-list button")).to_have_count(2)

    with term.page.expect_download() as download:
        term.page.click("#files-list button[aria-label='download bin.dat']")
    assert download.value.suggested_filename == "bin.dat"
    assert Path(download.value.path()).read_bytes() == b"caf\xc3\xa9\x00\x01\xff"
    with term.page.expect_download() as download:
        term.page.click("#files-list button[aria-label='download sub/x.txt']")
    assert download.value.suggested_filename == "x.txt"
    assert Path(download.value.path()).read_bytes() == b"hi\n"
    term.page.screenshot(path=str(artifacts / "files-panel.png"))

    # A command that changes files refreshes the open panel.
    term.run("rm bin.dat && echo new > new.txt")
    term.expect(column(term, "path")).to_have_text(["link → sub/x.txt", "new.txt", "sub/x.txt"])
    term.expect(term.page.locator("#files-message")).to_have_text("")
    assert errors == []


def test_an_upload_appears_in_the_panel_and_a_following_cat_prints_it(
        open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    errors = csp_errors(term)
    term.new_session()
    open_files(term)
    term.expect(term.page.locator("#files-note")).to_have_text("No files yet.")

    notes = "uploaded, ünïcode\n".encode()
    upload(term, "notes.txt", notes, "docs/")
    term.expect(column(term, "path")).to_have_text(["docs/notes.txt"])
    term.expect(term.page.locator("#files-message")).to_have_text("Uploaded docs/notes.txt.")
    # Its history entry shows in the scrollback, with what it changed.
    entry = term.page.locator("#scrollback article.cmd.upload")
    term.expect(entry.locator(".text")).to_have_text("upload docs/notes.txt")
    term.expect(entry.locator("details.changes summary")).to_have_text("2 added")

    every_byte = bytes(range(256)) * 3
    upload(term, "ignored-name", every_byte, "docs/all bytes")
    term.expect(column(term, "path")).to_have_text(["docs/all bytes", "docs/notes.txt"])
    term.expect(column(term, "size")).to_have_text(["768 B", f"{len(notes)} B"])
    # Both uploads are in the scrollback before a command is counted after them.
    term.expect(term.page.locator("#scrollback article.cmd.upload")).to_have_count(2)

    term.expect(term.run("cat docs/notes.txt").locator("pre.out")).to_have_text(
        "uploaded, ünïcode\n")
    term.expect(term.run("sha256sum 'docs/all bytes' "
                         "| cut -d' ' -f1").locator("pre.out")).to_have_text(
        hashlib.sha256(every_byte).hexdigest() + "\n")
    # Recalling history skips the uploads: they are not commands to run again.
    term.input.press("ArrowUp")
    term.input.press("ArrowUp")
    term.expect(term.input).to_have_value("cat docs/notes.txt")
    term.input.press("ArrowUp")
    term.expect(term.input).to_have_value("cat docs/notes.txt")
    assert errors == []


def test_an_upload_to_a_busy_session_shows_the_error_in_the_panel(
        open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    term.new_session()
    busy = term.submit("echo started; sleep 60")
    term.expect(busy.locator("pre.out")).to_contain_text("started")
    open_files(term)

    upload(term, "late.txt", b"late\n")
    message = term.page.locator("#files-message")
    term.expect(message).to_have_text("session is busy — Upload when its commands have finished.")
    term.expect(message).to_have_class(re.compile(r"\berror\b"))
    term.expect(term.page.locator("#files-note")).to_have_text("No files yet.")

    busy.locator("button[data-cancel]").click()
    term.expect(busy).to_have_attribute("data-status", "cancelled")
    term.page.click("#upload-form button[type=submit]")  # the file is still chosen
    term.expect(column(term, "path")).to_have_text(["late.txt"])
    term.expect(message).not_to_have_class(re.compile(r"\berror\b"))


def test_a_hostile_file_name_shows_as_text_and_runs_nothing(
        open_terminal: OpenTerminal, artifacts: Path) -> None:
    term = open_terminal("alice")
    errors = csp_errors(term)
    term.new_session()
    article = term.run(f"touch '{HOSTILE}'")
    article.locator("details.changes summary").click()
    term.expect(article.locator("details.changes .path")).to_have_text([HOSTILE])

    open_files(term)
    upload(term, "x", b"svg\n", "<svg onload=alert(2)>")
    term.expect(column(term, "path")).to_have_text([HOSTILE, "<svg onload=alert(2)>"])
    term.expect(term.page.locator("#files-message")).to_have_text("Uploaded <svg onload=alert(2)>.")
    term.expect(term.page.locator("#scrollback article.cmd.upload "
                                  "details.changes summary")).to_have_text("1 added")

    term.page.reload()
    open_files(term)
    term.expect(column(term, "path")).to_have_text([HOSTILE, "<svg onload=alert(2)>"])
    term.expect(term.page.locator("img, svg")).to_have_count(0)
    term.page.screenshot(path=str(artifacts / "files-hostile.png"))
    assert term.dialogs == []
    assert errors == []


def test_the_files_panel_fits_a_phone(open_terminal: OpenTerminal, artifacts: Path) -> None:
    term = open_terminal("alice", width=375, height=700)
    term.new_session()
    open_files(term)
    long_name = "a-rather-long-file-name-" * 8 + ".txt"
    upload(term, long_name, b"x")
    term.expect(column(term, "path")).to_have_text([long_name])

    widths = term.page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth,"
        " document.body.scrollWidth]")
    assert widths[0] <= widths[1] and widths[2] <= widths[1], widths
    box = term.input.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375, box
    term.page.screenshot(path=str(artifacts / "files-phone.png"))
