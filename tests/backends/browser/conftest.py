"""The browser module's tests share one headless Chromium serving one folder of built modules.

Chromium is Debian's (`scripts/dev-setup.sh` installs `chromium` and `chromium-driver` where
missing).  Without it the tests skip on a developer's machine and fail under CI, where its absence is
a broken setup.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from loam.tools.browser_run import Browser, BrowserError, find_chromium


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the browser serves: each test builds its modules into a subfolder."""
    return tmp_path_factory.mktemp("browser")


@pytest.fixture(scope="session")
def browser(served: Path) -> Iterator[Browser]:
    try:
        find_chromium()
    except BrowserError as e:
        if os.environ.get("CI"):
            pytest.fail(str(e))
        pytest.skip(str(e))
    with Browser(served) as b:
        yield b
