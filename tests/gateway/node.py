"""The JavaScript client's side of the tests: Debian's node and npm, and the
npm packages pinned in tests/gateway/postgrest_js/ (package.json and its
lock), installed with npm's defaults into that folder's node_modules
(git-ignored) the first time a test needs them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

PROJECT = Path(__file__).resolve().parent / "postgrest_js"


def tools_present() -> bool:
    return shutil.which("node") is not None and shutil.which("npm") is not None


def _installed(package: str) -> str | None:
    manifest = PROJECT / "node_modules" / package / "package.json"
    return json.loads(manifest.read_text())["version"] if manifest.exists() else None


def install() -> Path:
    """The project folder, its pinned packages installed (`npm ci`: exactly the lock)."""
    wanted = json.loads((PROJECT / "package.json").read_text())["dependencies"]
    if any(_installed(name) != version for name, version in wanted.items()):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=PROJECT, check=True,
                       capture_output=True, timeout=600)
    return PROJECT


def run(script: str, *args: str, timeout: float = 240) -> str:
    """``node script args…`` in the project folder; its stdout, or an error with its stderr."""
    done = subprocess.run(["node", script, *args], cwd=PROJECT, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"node {script} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return done.stdout
