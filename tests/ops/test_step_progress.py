"""ops/lib.sh's `step`: a set-up step is one line, "LABEL … ok (N s)", its
stderr kept in a log. With --show, the lines of a slow step that match are
shown as they come, indented, between the step's line and its "ok" (the
image build's stages on a new machine), while its stdout (the image id) is
passed through as a result; a step that only reuses what is there stays one
line; a failing step says so, names its log and exits with its status."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.fixtures_stack import REPO

SCRIPT = r"""
set -euo pipefail
. "$LIB"
slow() {
  echo "build-sandbox-image: base image present" >&2
  echo "build-sandbox-image: building pg-shell-sandbox:1" >&2
  echo "Step 1/2 : FROM base" >&2
  echo "noise" >&2
  echo "Step 2/2 : RUN apt-get install" >&2
  echo "sha256:built"
}
reused() { echo "build-sandbox-image: pg-shell-sandbox:1 already built" >&2; echo "sha256:kept"; }
broken() { echo "Step 1/2 : FROM base" >&2; echo "no space left" >&2; return 3; }
show='^build-sandbox-image: (debootstrap|importing|building)|^Step [0-9]+/[0-9]+ :'
image=$(step --show "$show" "sandbox image" "$1" | tail -n 1)
echo "result: $image" >&2
"""


def run_step(tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "setup"
    script.write_text(SCRIPT)
    return subprocess.run(["bash", str(script), command], capture_output=True, text=True,
                          env={"LIB": str(REPO / "ops" / "lib.sh"), "PATH": "/usr/bin:/bin",
                               "PG_SHELL_STATE_DIR": str(tmp_path / "state")})


def test_a_slow_step_shows_its_stages_and_passes_its_result_through(tmp_path: Path) -> None:
    done = run_step(tmp_path, "slow")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[:4] == ["setup: sandbox image … ",
                         "    build-sandbox-image: building pg-shell-sandbox:1",
                         "    Step 1/2 : FROM base",
                         "    Step 2/2 : RUN apt-get install"]
    assert lines[4].startswith("setup: sandbox image … ok (")
    assert lines[5:] == ["result: sha256:built"]
    log = (tmp_path / "state" / "logs" / "setup.sandbox-image.log").read_text()
    assert "noise" in log and "base image present" in log


def test_a_step_that_reuses_what_is_there_stays_one_line(tmp_path: Path) -> None:
    done = run_step(tmp_path, "reused")
    assert done.returncode == 0, done.stderr
    first, second = done.stderr.splitlines()
    assert first.startswith("setup: sandbox image … ok (") and second == "result: sha256:kept"


def test_a_failing_step_names_its_log_and_exits_with_its_status(tmp_path: Path) -> None:
    done = run_step(tmp_path, "broken")
    assert done.returncode == 3
    log = tmp_path / "state" / "logs" / "setup.sandbox-image.log"
    assert f"setup: sandbox image … failed (exit 3; log: {log})" in done.stderr
    assert "    no space left" in done.stderr and "result:" not in done.stderr
