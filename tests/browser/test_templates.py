"""The page's template picker: a tenant granted a template sees it beside
"new session", a session made with it runs on the template's image, and the
session list says which template a session is on."""

from __future__ import annotations

from collections.abc import Callable

from tests.browser.stack import Terminal
from tests.fixtures_stack import Daemon
from tests.support import call, connect_as


def test_a_session_made_on_a_template_from_the_page_runs_on_its_image(
        open_terminal: Callable[..., Terminal], daemon: Daemon, db: str, tools_image: str) -> None:
    term = open_terminal("alice")
    picker = term.page.locator("#template-picker option")
    term.expect(picker).to_have_text(["base — Debian 12: bash, coreutils, python3, git, jq, less, "
                                      "nano, vim"])
    operator = connect_as(db, "shell_admin")
    call(operator, "SELECT * FROM shell.define_template('tools', 'bc and a marker')")
    call(operator, "SELECT * FROM shell.promote_image(%s, 'tools')", (tools_image,))
    call(operator, "SELECT * FROM shell.set_user_templates('alice', ARRAY['tools'])")
    operator.close()
    daemon.wait_for_log(f"template tools: image {tools_image} promoted", timeout=30)

    term.page.goto(term.url + "/#")
    term.expect(picker).to_have_count(2)
    term.expect(picker.nth(1)).to_have_text("tools — bc and a marker")
    term.page.select_option("#template-picker", "tools")
    session = term.new_session("on tools")
    article = term.run("cat /etc/pg-shell-template; echo '6*7' | bc")
    term.expect(article.locator("pre.out")).to_have_text("tools\n42\n")

    term.page.goto(term.url + "/#")
    item = term.page.locator(f'#session-list li[data-id="{session}"] .info')
    term.expect(item).to_contain_text("tools · /home/sandbox")
