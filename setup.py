"""Only what pyproject.toml cannot say: the wheel carries the files pg_shell needs
beside its code (the SQL migrations, the web UI, the sandbox image's build context
and the script that builds it) as package data under executor/_share/, where
executor/resources.py finds them. A checkout uses the folders themselves."""

from __future__ import annotations

import os

from setuptools import setup
from setuptools.command.build_py import build_py

SHARED_DIRS = ("sql", "html", "sandbox-image")
SHARED_FILES = ("ops/build-sandbox-image",)


class BuildPyWithSharedFiles(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable install reads the checkout's folders
        share = os.path.join(self.build_lib, "executor", "_share")
        for name in SHARED_DIRS:
            # copy_tree keeps the modes: the image's entrypoint must stay executable.
            self.copy_tree(name, os.path.join(share, name))
        for name in SHARED_FILES:
            self.mkpath(os.path.dirname(os.path.join(share, name)))
            self.copy_file(name, os.path.join(share, name))


setup(cmdclass={"build_py": BuildPyWithSharedFiles})
