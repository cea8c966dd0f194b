"""The page's modules that need no page (html/tty/input-queue.js, …), run by
node's own test runner on the files in tests/unit/js/."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import require

TESTS = Path(__file__).resolve().parent / "js"
REPO = TESTS.parents[2]


def test_page_modules_with_node(tmp_path: Path) -> None:
    require(shutil.which("node") is not None, "node (ops/install-packages test)")
    files = sorted(str(p) for p in TESTS.glob("*.test.mjs"))
    assert files
    # The page's modules are .js files, and the page has no package.json:
    # node reads them as ES modules from a copy that has one (node 18, as
    # Debian 12 has it, does not detect their syntax by itself).
    copy = tmp_path / "page"
    shutil.copytree(REPO / "html", copy / "html")
    shutil.copytree(TESTS, copy / "tests" / "unit" / "js")
    (copy / "package.json").write_text('{"type": "module"}\n')
    copied = [str(copy / "tests" / "unit" / "js" / Path(f).name) for f in files]
    done = subprocess.run(["node", "--test", *copied], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "# pass 0" not in done.stdout, done.stdout[-4000:]  # the tests were found and ran
