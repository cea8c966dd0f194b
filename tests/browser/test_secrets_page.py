"""Secrets on the page (0046_secrets_page): the secrets view sets, lists by
version and deletes them without a value ever reaching the page, a URL,
localStorage or the console, and a session chooses the ones its commands
get, against the real stack. set_secret encrypts to the key the stack's
executor registered at start-up."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.browser.stack import Terminal
from tests.support import connect_as, one

OpenTerminal = Callable[..., Terminal]
VALUE = "s3cret-value-that-must-not-show"
OTHER_VALUE = "another-value-never-shown"


def open_secrets(term: Terminal) -> None:
    term.page.click("#secrets-link")
    term.expect(term.page.locator("#secrets-view")).to_be_visible()


def set_secret(term: Terminal, name: str, value: str) -> None:
    form = term.page.locator("#secret-form")
    form.locator("[name=p_name]").fill(name)
    form.locator("[name=p_value]").fill(value)
    form.get_by_role("button", name="set").click()


def secret_item(term: Terminal, name: str) -> Any:
    return term.page.locator(f'#secret-list li[data-name="{name}"]')


def session_secrets(db: str, session_id: str) -> list[str]:
    conn = connect_as(db, "postgres")
    try:
        return list(one(conn, "SELECT secrets FROM shell.sessions WHERE id = %s", (session_id,)))
    finally:
        conn.close()


def test_a_secret_is_set_listed_by_version_and_deleted_and_its_value_never_shown(
        open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    page = term.page
    requested: list[str] = []
    logged: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.on("console", lambda message: logged.append(message.text))
    open_secrets(term)
    term.expect(page.locator("#secret-list")).to_have_text("No secrets yet.")
    value_field = page.locator("#secret-form [name=p_value]")
    term.expect(value_field).to_have_attribute("type", "password")
    term.expect(value_field).to_have_attribute("autocomplete", "off")

    set_secret(term, "API_TOKEN", VALUE)
    term.expect(secret_item(term, "API_TOKEN")).to_contain_text("version 1")
    term.expect(term.status).to_contain_text("Secret API_TOKEN set (version 1)")
    term.expect(value_field).to_have_value("")

    set_secret(term, "API_TOKEN", OTHER_VALUE)
    term.expect(secret_item(term, "API_TOKEN")).to_contain_text("version 2")

    # The database's message and hint, on the status line as other errors;
    # the value is emptied all the same, the name kept to correct.
    set_secret(term, "1BAD", VALUE)
    term.expect(term.status).to_have_text(
        "not a secret name: 1BAD — A shell variable name: a letter or _, then up to 63 letters, "
        "digits or _.")
    term.expect(term.status).to_have_class("status error")
    term.expect(value_field).to_have_value("")
    term.expect(page.locator("#secret-form [name=p_name]")).to_have_value("1BAD")
    set_secret(term, "PATH", VALUE)
    term.expect(term.status).to_contain_text("secret name PATH belongs to the shell")
    term.expect(page.locator("#secret-list li")).to_have_count(1)

    for value in (VALUE, OTHER_VALUE):
        assert value not in page.content()
        assert value not in page.url
        assert value not in page.evaluate("JSON.stringify(localStorage)")
        assert not [url for url in requested if value in url]
        assert not [text for text in logged if value in text]

    # Deleting asks for a second click, as archiving a session does.
    delete = secret_item(term, "API_TOKEN").get_by_role("button", name="delete API_TOKEN")
    delete.click()
    term.expect(delete).to_have_text("delete: sure?")
    delete.click()
    term.expect(secret_item(term, "API_TOKEN")).to_have_count(0)
    term.expect(term.status).to_contain_text("Secret API_TOKEN deleted")
    term.expect(page.locator("#secret-list")).to_have_text("No secrets yet.")


def test_a_session_uses_the_secrets_chosen_for_it(open_terminal: OpenTerminal, db: str) -> None:
    term = open_terminal("alice")
    page = term.page
    open_secrets(term)
    set_secret(term, "API_TOKEN", VALUE)
    term.expect(secret_item(term, "API_TOKEN")).to_contain_text("version 1")
    set_secret(term, "DB_PASSWORD", OTHER_VALUE)
    term.expect(secret_item(term, "DB_PASSWORD")).to_contain_text("version 1")

    # The new-session form offers them.
    page.click(".brand")
    term.expect(page.locator("#sessions-view")).to_be_visible()
    page.locator("#new-session-secrets").get_by_role("checkbox", name="API_TOKEN").check()
    session = term.new_session("with secrets")
    assert session_secrets(db, session) == ["API_TOKEN"]

    # The open session says which it uses, and changes them.
    panel = page.locator("#session-secrets")
    term.expect(page.locator("#session-secrets-summary")).to_have_text("API_TOKEN")
    panel.locator("summary").click()
    panel.get_by_role("checkbox", name="API_TOKEN").uncheck()
    panel.get_by_role("checkbox", name="DB_PASSWORD").check()
    panel.get_by_role("button", name="save").click()
    term.expect(term.status).to_contain_text("This session's next commands get DB_PASSWORD.")
    term.expect(page.locator("#session-secrets-summary")).to_have_text("DB_PASSWORD")
    assert session_secrets(db, session) == ["DB_PASSWORD"]

    page.click("#secrets-link")
    term.expect(secret_item(term, "DB_PASSWORD")).to_contain_text("used by 1 session")
    delete = secret_item(term, "DB_PASSWORD").locator("button.delete")
    delete.click()
    delete.click()
    term.expect(secret_item(term, "DB_PASSWORD")).to_have_count(0)

    # A deleted secret the session still names is shown as such, and dropped there.
    page.goto(f"{term.url}/#session={session}")
    term.expect(page.locator("#session-secrets-summary")).to_have_text("DB_PASSWORD (not set)")
    panel.locator("summary").click()
    panel.get_by_role("checkbox", name="DB_PASSWORD").uncheck()
    panel.get_by_role("button", name="save").click()
    term.expect(term.status).to_contain_text("This session's next commands get no secrets.")
    term.expect(page.locator("#session-secrets-summary")).to_have_text("none")
    assert session_secrets(db, session) == []
    for value in (VALUE, OTHER_VALUE):
        assert value not in page.content()
