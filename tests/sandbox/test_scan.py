"""The supervisor's scan against the executor's index: a directory whose
entries hash (as executor/workspace/cache.py hashes them) to the digest the
executor knows is sent as unchanged, any other whole. Real engine, real
supervisor: the two implementations of the digest must agree."""

from __future__ import annotations

from typing import Any

from executor.workspace.cache import Children, listing_digest
from tests.sandbox.conftest import NoFiles

TREE = ("mkdir -p a/b c empty && echo one > a/b/f && echo two > c/g && ln -s a/b/f link"
        " && chmod 700 c")


def digests(manifest: list[list[Any]]) -> dict[str, str]:
    """Each directory's digest, from a whole manifest."""
    children: dict[str, Children] = {"": {}}
    for path, kind, mode, size, inode, ctime, target in manifest:
        parent, _, name = path.rpartition("/")
        children.setdefault(parent, {})[name] = [kind, mode, size, inode, ctime, target]
        if kind == "dir":
            children.setdefault(path, {})
    return {path: listing_digest(entries) for path, entries in children.items()}


def scan(run: Any, command: str, known: dict[str, str]) -> list[list[Any]]:
    files = NoFiles(known)
    ran = run(command, files=files)
    assert ran.result.exit_code == 0, ran.output
    return files.manifests[0]


def test_directories_found_as_known_are_sent_as_unchanged(run: Any) -> None:
    whole = scan(run, TREE, {})
    assert all(len(item) == 7 for item in whole)
    known = digests(whole)
    assert sorted(scan(run, "true", known)) == [[""], ["a"], ["a/b"], ["c"], ["empty"]]


def test_a_changed_directory_is_sent_whole_and_the_others_are_not(run: Any) -> None:
    known = digests(scan(run, TREE, {}))
    manifest = scan(run, "echo more >> a/b/f && touch empty/new", known)
    sent = {item[0] for item in manifest if len(item) == 7}
    # a/b and empty changed; so did the home, whose entry for empty (its ctime) changed.
    assert sent == {"a/b/f", "empty/new", "a", "c", "empty", "link"}
    assert sorted(item for item in manifest if len(item) == 1) == [["a"], ["c"]]


def test_a_wrong_digest_or_an_unknown_directory_gets_the_whole_listing(run: Any) -> None:
    known = digests(scan(run, TREE, {}))
    manifest = scan(run, "true", {**known, "a": "0" * 32, "nowhere": "0" * 32})
    assert ["a/b"] in manifest and ["a"] not in manifest
    assert {item[0] for item in manifest if len(item) == 7} == {"a/b"}  # the entries of a


def test_a_directory_holding_a_skipped_entry_is_always_sent_whole(run: Any) -> None:
    known = digests(scan(run, TREE + " && mkfifo c/pipe", {}))
    manifest = scan(run, "true", known)
    assert ["c"] not in manifest
    assert {item[0] for item in manifest if len(item) == 7} == {"c/g"}


def held_of(manifest: list[list[Any]], directory: str) -> dict[str, list[int]]:
    """[inode, ctime] of the subdirectories of ``directory``, from a whole manifest."""
    return {path: [inode, ctime] for path, kind, _mode, _size, inode, ctime, _target in manifest
            if kind == "dir" and path.rpartition("/")[0] == directory}


def targeted(run: Any, command: str, changed: list[str],
             held: dict[str, list[int]]) -> list[list[Any]]:
    files = NoFiles(changed={"changed": changed, "held": held})
    ran = run(command, files=files)
    assert ran.result.exit_code == 0, ran.output
    return files.manifests[0]


def test_only_the_directories_named_as_changed_are_listed(run: Any) -> None:
    whole = scan(run, TREE, {})
    manifest = targeted(run, "echo more >> a/b/f", ["a"], held_of(whole, "a"))
    # a is listed; a/b is held as it is, so it is not walked; nothing else is.
    assert sorted(item[0] for item in manifest) == ["a/b"]


def test_a_directory_put_in_the_place_of_a_held_one_is_walked_whole(run: Any) -> None:
    whole = scan(run, TREE, {})
    manifest = targeted(run, "rm -r a/b && mkdir -p a/b/new && touch a/b/new/x", ["a"],
                        held_of(whole, "a"))
    assert sorted(item[0] for item in manifest) == ["a/b", "a/b/new", "a/b/new/x"]


def test_a_named_directory_that_is_gone_or_not_a_directory_is_not_listed(run: Any) -> None:
    scan(run, TREE, {})
    manifest = targeted(run, "true", ["gone", "link", "c/g"], {})
    assert manifest == []


def test_a_named_directory_below_one_its_owner_cannot_enter_is_listed(run: Any) -> None:
    scan(run, TREE, {})
    manifest = targeted(run, "chmod 000 a", ["a/b"], {})
    assert [item[0] for item in manifest] == ["a/b/f"]
    # ... and the mode the tenant gave a stays as it was.
    assert run("stat -c %a a").output.strip() == "0"


def test_a_named_directory_that_cannot_be_looked_at_fails_the_scan(run: Any) -> None:
    # 17 names of 240 bytes: a path of 4,096 bytes, one past what lstat takes.
    name = "x" * 240
    deep = "/".join([name] * 17)
    files = NoFiles(changed={"changed": [deep], "held": {}})
    ran = run(f"for i in $(seq 17); do mkdir {name} && cd {name}; done", files=files)
    assert ran.result.exit_code == 0, ran.output
    failed = files.reports[0].failed
    assert failed is not None and failed[0] == deep and "cannot list" in failed[1]
