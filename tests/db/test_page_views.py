"""The page's views as text/html functions (0033_page_views_html): the
session list, a session's lineage, the files panel and a replay's
comparison, each rendered with the tenant's text escaped and with the tenant
rules of its JSON sibling."""

from __future__ import annotations

import re

import pytest

from tests.db.api_helpers import run
from tests.db.claim_support import new_tenant, raises_sqlstate, superuser
from tests.support import call, one

HOSTILE = "<img src=x onerror=alert(1)>"
ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"


def html(conn, sql: str, params: tuple = ()) -> str:
    return str(one(conn, sql, params))


def items(page: str) -> list[str]:
    return re.findall(r"<li data-id=.*?</li>(?=\n|$)", page)


def escape(text: str) -> str:
    """As shell.html_escape."""
    for raw, entity in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"),
                        ("'", "&#39;")):
        text = text.replace(raw, entity)
    return text


def when(hour: str) -> str:
    return f'<time datetime="2026-01-02T{hour}:04:05Z">2026-01-02 {hour}:04 UTC</time>'


def test_the_session_list_escapes_names_and_links_lineage_both_ways(db):
    alice, mallory = new_tenant(db, "alice"), new_tenant(db, "mallory")
    assert html(alice.conn, "SELECT shell_api.sessions_html()") == (
        '<li class="empty">No sessions yet.</li>')
    source = alice.session(HOSTILE)
    cid = alice.submit(source, "cd /tmp")
    run(db, cid, cwd="/tmp")
    fork = str(one(alice.conn, "SELECT shell_api.fork_session(%s)", (cid,)))
    call(alice.conn, "SELECT shell_api.rename_session(%s, 'child')", (fork,))
    replay = str(one(alice.conn, "SELECT shell_api.replay_session(%s, %s)", (source, cid)))
    mallory.session("mallory's")
    # The list's order is list_sessions' (most recently active first).
    su = superuser(db)
    for age, sid in enumerate((replay, fork, source)):
        call(su, "UPDATE shell.sessions SET last_active_at = timestamptz '2026-01-02 03:04:05+00'"
                 " - %s * interval '1 hour' WHERE id = %s", (age, sid))

    page = html(alice.conn, "SELECT shell_api.sessions_html()")
    assert HOSTILE not in page and "mallory" not in page
    replay_name = escape(one(alice.conn, "SELECT name FROM shell.sessions WHERE id = %s",
                             (replay,)))
    assert replay_name == f"replay of {ESCAPED} from 1"
    actions = ('<span class="actions"><button type="button" class="rename">rename</button>'
               '<button type="button" class="archive">archive</button></span>')
    link = f'<a href="#session={source}">{ESCAPED}</a>'
    assert items(page) == [
        f'<li data-id="{replay}"><a href="#session={replay}" class="name">{replay_name}</a>'
        f'<span class="info">/home/sandbox · {when("03")}</span>'
        f'<span class="origin">replay of {link} · <a href="#replay={replay}">compare</a></span>'
        f'{actions}</li>',
        f'<li data-id="{fork}"><a href="#session={fork}" class="name">child</a>'
        f'<span class="info">/tmp · {when("02")}</span>'
        f'<span class="origin">fork of {link} at command {cid}</span>{actions}</li>',
        f'<li data-id="{source}"><a href="#session={source}" class="name">{ESCAPED}</a>'
        f'<span class="info">/tmp · {when("01")}</span>'
        f'<span class="children">forks: <a href="#session={fork}">child</a></span>'
        f'<span class="children">replays: <a href="#session={replay}">{replay_name}</a>'
        f' (<a href="#replay={replay}">compare</a>)</span>{actions}</li>',
    ]


def test_an_archived_session_reads_at_its_link_marked_with_a_restore_button(db):
    alice, mallory = new_tenant(db, "alice"), new_tenant(db, "mallory")
    source = alice.session("source")
    cid = alice.submit(source, "true")
    run(db, cid)
    fork = str(one(alice.conn, "SELECT shell_api.fork_session(%s)", (cid,)))
    assert html(alice.conn, "SELECT shell_api.session_lineage_html(%s)", (source,)) == (
        f'<span class="children">forks: <a href="#session={fork}">'
        f'{one(alice.conn, "SELECT name FROM shell.sessions WHERE id = %s", (fork,))}</a></span>')
    replay = str(one(alice.conn, "SELECT shell_api.replay_session(%s, %s)", (source, cid)))
    call(alice.conn, "SELECT shell_api.archive_session(%s)", (source,))
    archived = f'<a href="#session={source}">source</a> <span class="gone">(archived)</span>'
    assert html(alice.conn, "SELECT shell_api.session_lineage_html(%s)", (fork,)) == (
        f'<span class="origin">fork of {archived} at command {cid}</span>')
    assert html(alice.conn, "SELECT shell_api.session_lineage_html(%s)", (replay,)) == (
        f'<span class="origin">replay of {archived} · '
        f'<a href="#replay={replay}">compare</a></span>')
    at = one(alice.conn, "SELECT archived_at AT TIME ZONE 'UTC' FROM shell.sessions WHERE id = %s",
             (source,))
    assert html(alice.conn, "SELECT shell_api.session_lineage_html(%s)", (source,)).startswith(
        f'<span class="archived">archived <time datetime="{at:%Y-%m-%dT%H:%M:%SZ}">'
        f'{at:%Y-%m-%d %H:%M} UTC</time>: read only</span> '
        f'<button type="button" class="unarchive" data-unarchive="{source}">restore</button>'
        f' · <span class="children">forks: <a href="#session={fork}">')
    fresh = alice.session("fresh")
    assert html(alice.conn, "SELECT shell_api.session_lineage_html(%s)", (fresh,)) == ""
    # Another tenant's (archived or not) and made-up sessions: the same answer.
    for sid in (source, fork, "00000000-0000-4000-8000-000000000000"):
        with raises_sqlstate("22023", "session not found"):
            call(mallory.conn, "SELECT shell_api.session_lineage_html(%s)", (sid,))
        mallory.conn.rollback()


def test_the_files_panel_lists_files_and_links_escaped_with_sizes_and_modes(db):
    alice, mallory = new_tenant(db, "alice"), new_tenant(db, "mallory")
    session = alice.session()
    empty = html(alice.conn, "SELECT shell_api.session_files_html(%s)", (session,))
    assert empty == (
        '<table class="files-table"><thead><tr><th>path</th><th>size</th><th>mode</th>'
        '<th><span class="visually-hidden">download</span></th></tr></thead>'
        '<tbody id="files-list"></tbody></table>'
        '<p id="files-note" class="files-note">No files yet.</p>')
    call(alice.conn, "SELECT shell_api.upload_file(%s, %s, %s, 384)",
         (session, f"d/{HOSTILE}", b"x" * 1536))
    upload = one(alice.conn, "SELECT shell_api.upload_file(%s, 'a \"q\"', 'abc')", (session,))
    su = superuser(db)
    root = one(su, "SELECT root_after FROM shell.commands WHERE id = %s", (upload,))
    root = one(su, "SELECT shell.tree_put_path(%s, ARRAY['link'], jsonb_build_object("
                   "'kind', 'symlink', 'mode', 511, 'size', 0, 'target', %s::text))",
               (root, HOSTILE))
    call(su, "UPDATE shell.sessions SET root = %s WHERE id = %s", (root, session))

    page = html(alice.conn, "SELECT shell_api.session_files_html(%s)", (session,))
    rows = re.search(r'<tbody id="files-list">(.*)</tbody>', page).group(1)
    assert rows == (
        '<tr><td class="path">a &quot;q&quot;</td><td class="size" title="3 bytes">3 B</td>'
        '<td class="mode">644</td><td class="action"><button type="button" class="link" '
        'data-download="a &quot;q&quot;" aria-label="download a &quot;q&quot;">download</button>'
        '</td></tr>'
        f'<tr><td class="path">d/{ESCAPED}</td><td class="size" title="1536 bytes">1.5 KiB</td>'
        '<td class="mode">600</td><td class="action"><button type="button" class="link" '
        f'data-download="d/{ESCAPED}" aria-label="download d/{ESCAPED}">download</button>'
        '</td></tr>'
        f'<tr><td class="path">link → {ESCAPED}</td><td class="size" title="0 bytes">link</td>'
        '<td class="mode">777</td><td class="action"></td></tr>')
    assert HOSTILE not in page
    assert page.endswith('<p id="files-note" class="files-note"></p>')
    for sid in (session, "00000000-0000-4000-8000-000000000000"):
        with raises_sqlstate("22023", "session not found"):
            call(mallory.conn, "SELECT shell_api.session_files_html(%s)", (sid,))
        mallory.conn.rollback()


@pytest.mark.parametrize(("size", "words"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (10239, "10.0 KiB"), (10240, "10 KiB"),
    (1048575, "1024 KiB"), (1048576, "1.0 MiB"), (5 * 2**30, "5.0 GiB"), (2**50, "1024 TiB"),
])
def test_sizes_read_as_the_files_panel_showed_them(db, size, words):
    # html/files.js's formatSize before 0033: below 10 one decimal, else whole.
    assert one(superuser(db), "SELECT shell.size_words(%s)", (size,)) == words


def test_a_replay_comparison_marks_what_differs_and_counts_what_is_still_to_run(db):
    alice, mallory = new_tenant(db, "alice"), new_tenant(db, "mallory")
    source = alice.session("original")
    same = alice.submit(source, "echo same")
    run(db, same, "same\n")
    differs = alice.submit(source, f"echo '{HOSTILE}'")
    run(db, differs, "a\n", exit_code=1)
    replay = str(one(alice.conn, "SELECT shell_api.replay_session(%s, %s)", (source, same)))
    replayed = [r["replay_id"] for r in call(
        alice.conn, "SELECT replay_id FROM shell_api.replay_comparison(%s)", (replay,))]
    replay_name = one(alice.conn, "SELECT name FROM shell.sessions WHERE id = %s", (replay,))
    title = (f'<p id="compare-title" class="compare-title">Replay <a href="#session={replay}">'
             f'{replay_name}</a> beside the original <a href="#session={source}">original</a></p>')

    waiting = html(alice.conn, "SELECT shell_api.replay_comparison_html(%s)", (replay,))
    assert waiting.startswith(title)
    assert ('<p id="compare-summary" class="compare-summary" role="status">'
            '0 of 2 commands gave the same result · 2 still to run</p>') in waiting
    assert '<div id="compare-rows" class="compare-rows" data-running="2">' in waiting
    assert waiting.count('<span class="label">replay</span> pending…</div>') == 2
    assert waiting.count('<article class="compare-row" data-same="pending">') == 2
    assert "differs" not in waiting

    run(db, replayed[0], "same\n")
    run(db, replayed[1], "b\n")
    page = html(alice.conn, "SELECT shell_api.replay_comparison_html(%s)", (replay,))
    assert HOSTILE not in page
    assert page == title + (
        '<p id="compare-summary" class="compare-summary" role="status">'
        '1 of 2 commands gave the same result</p>'
        '<div id="compare-rows" class="compare-rows" data-running="0">'
        '<article class="compare-row" data-same="true"><div class="command">$ echo same</div>'
        '<div class="side"><span class="label">original</span> <span class="exit">exit 0</span>'
        '<pre class="out">same\n</pre></div>'
        '<div class="side"><span class="label">replay</span> <span class="exit">exit 0</span>'
        '<pre class="out">same\n</pre></div></article>'
        '<article class="compare-row" data-same="false">'
        f'<div class="command">$ echo &#39;{ESCAPED}&#39;</div>'
        '<div class="side"><span class="label">original</span> '
        '<span class="exit differs">exit 1</span><pre class="out differs">a\n</pre></div>'
        '<div class="side"><span class="label">replay</span> <span class="exit differs">exit 0'
        '</span><pre class="out differs">b\n</pre></div></article></div>')

    for run_id in (replay, "00000000-0000-4000-8000-000000000000"):
        with raises_sqlstate("22023", "session not found"):
            call(mallory.conn, "SELECT shell_api.replay_comparison_html(%s)", (run_id,))
        mallory.conn.rollback()
