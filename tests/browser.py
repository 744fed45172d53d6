"""Headless Chromium for tests that look at HTML pages: the Debian packages `chromium` and
`chromium-driver`, driven by selenium (no browser download; .ci/run installs both packages).

A test may skip for want of a browser only outside CI: with CI=true a missing browser fails.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
# Headless, and nothing that reaches the network or needs a GPU or a sandbox (tests run as root).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def missing() -> str | None:
    """Why no browser can be started here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "the Python package selenium is not installed (pip install -e '.[test]')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).is_file():
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    return None


def require_browser() -> None:
    """Skip the calling test when no browser is installed, unless in CI, where that is a failure."""
    reason = missing()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the browser tests: {reason}")
    pytest.skip(reason)


def start_chromium(user_data_dir: Path, width: int = 1400, height: int = 1000):
    """A selenium WebDriver on a fresh headless Chromium profile in `user_data_dir`."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={user_data_dir}")
    options.add_argument(f"--window-size={width},{height}")
    return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
