"""The page's modules that need no page (html/tty/input-queue.js, …), run by
node's own test runner on the files in tests/unit/js/."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import require

TESTS = Path(__file__).resolve().parent / "js"


def test_page_modules_with_node() -> None:
    require(shutil.which("node") is not None, "node (ops/install-packages test)")
    files = sorted(str(p) for p in TESTS.glob("*.test.mjs"))
    assert files
    # The page's modules are .js files without a package.json: node reads
    # them as ES modules when it detects their syntax.
    done = subprocess.run(["node", "--experimental-detect-module", "--test", *files],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
