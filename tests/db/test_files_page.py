"""The terminal's fragment of a command that changed files (0012_files_page):
a one-line summary that opens to the paths, escaped, capped, and built from
the caller's own command only."""

from __future__ import annotations

import re

from tests.db.api_helpers import run
from tests.db.claim_support import new_tenant, raises_sqlstate, superuser
from tests.support import call, one

HOSTILE = "<img src=x onerror=alert(1)>"


def fragment(conn, command_id: int) -> str:
    return str(one(conn, "SELECT shell.render_command(c) FROM shell.commands c WHERE c.id = %s",
                   (command_id,)))


def changes(html: str) -> str:
    found = re.search(r'<details class="changes">.*</details>', html)
    return found.group(0) if found else ""


def test_a_command_that_changed_nothing_has_no_summary(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    cid = alice.submit(session, "true")
    run(db, cid)
    html = fragment(alice.conn, cid)
    assert "<details" not in html
    assert html.endswith('<div class="meta">done · exit 0 · 12 ms</div></article>')


def test_uploads_show_what_they_changed_with_tenant_paths_escaped(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    added = one(alice.conn, "SELECT shell_api.upload_file(%s, %s, 'x')", (session, f"d/{HOSTILE}"))
    modified = one(alice.conn, "SELECT shell_api.upload_file(%s, %s, 'y')",
                   (session, f"d/{HOSTILE}"))

    first = fragment(alice.conn, added)
    assert first.startswith(f'<article class="cmd upload" id="cmd-{added}"')
    assert changes(first) == (
        '<details class="changes"><summary>2 added</summary><ul>'
        '<li class="added"><span class="change">added</span> <span class="path">d/</span></li>'
        '<li class="added"><span class="change">added</span> '
        '<span class="path">d/&lt;img src=x onerror=alert(1)&gt;</span></li>'
        '</ul></details>')
    assert changes(fragment(alice.conn, modified)) == (
        '<details class="changes"><summary>1 modified</summary><ul>'
        '<li class="modified"><span class="change">modified</span> '
        '<span class="path">d/&lt;img src=x onerror=alert(1)&gt;</span></li>'
        '</ul></details>')
    page = one(alice.conn, "SELECT shell_api.latest_output_html(%s)", (session,))
    assert HOSTILE not in page and page.count('<details class="changes">') == 2


def test_the_list_is_cut_after_a_hundred_paths_but_the_counts_are_whole(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    upload = one(alice.conn, "SELECT shell_api.upload_file(%s, 'gone', 'x')", (session,))
    su = superuser(db)
    # The entry made to go from the root holding "gone" to one of 104 new
    # files: 104 added, 1 deleted.
    root = one(su, "SELECT root_before FROM shell.commands WHERE id = %s", (upload,))
    blob = one(su, "SELECT upload ->> 'sha256' FROM shell.commands WHERE id = %s", (upload,))
    for i in range(104):
        root = one(su, "SELECT shell.tree_put_path(%s, ARRAY[%s], jsonb_build_object("
                       "'kind', 'file', 'mode', 420, 'size', 1, 'object', %s::text))",
                   (root, f"f{i:03}", blob))
    call(su, "UPDATE shell.commands SET root_before = root_after, root_after = %s WHERE id = %s",
         (root, upload))

    html = changes(fragment(alice.conn, upload))
    assert "<summary>104 added, 1 deleted</summary>" in html
    items = re.findall(r'<li class="(\w+)">', html)
    assert len(items) == 101 and items[-1] == "more"
    # In byte order of the paths: f000 … f099 are listed, f100 … f103 and gone are not.
    assert '<span class="path">f000</span>' in html and '<span class="path">f099</span>' in html
    assert '<span class="path">f100</span>' not in html and '>gone<' not in html
    assert html.endswith('<li class="more">and 5 more</li></ul></details>')
    su.close()


def test_a_made_up_row_does_not_reveal_another_tenants_changes(db):
    alice, bob = new_tenant(db, "alice"), new_tenant(db, "bob")
    bobs = one(bob.conn, "SELECT shell_api.upload_file(%s, 'secret', 'x')", (bob.session(),))
    mine = one(alice.conn, "SELECT shell_api.upload_file(%s, 'mine', 'x')", (alice.session(),))
    # Alice's row with Bob's id and roots: the roots are read again, as hers.
    su = superuser(db)
    bob_row = call(su, "SELECT root_before, root_after FROM shell.commands WHERE id = %s",
                   (bobs,))[0]
    su.close()
    with raises_sqlstate("22023", "command not found"):
        call(alice.conn,
             "SELECT shell.render_changes(jsonb_populate_record(c, jsonb_build_object("
             "'id', %s::bigint, 'root_before', %s::text, 'root_after', %s::text)))"
             " FROM shell.commands c WHERE c.id = %s",
             (bobs, bob_row["root_before"], bob_row["root_after"], mine))
