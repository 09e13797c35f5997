"""npm packages the MCP tests run (servers and clients nobody here wrote), installed from the npm
registry with npm itself, pinned, once per machine into a cache directory
(`AGENTJOURNAL_NPM_CACHE`, else the temporary directory), never into the repository.

Without node or npm, or when the registry cannot be reached, the tests that need them are
skipped; in CI (`CI` set) that is a failure instead, as a missing PostgreSQL is.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# Pinned: a test's result must not change with a release of someone else's package.
PACKAGES = {
    "@modelcontextprotocol/sdk": "1.32.2",  # the official TypeScript SDK (its client)
    "@modelcontextprotocol/server-everything": "2026.8.31",  # the reference test server
}
INSTALL_SECONDS = 600


def _unavailable(why: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(why)
    pytest.skip(why)


def npm_root() -> Path:
    """The directory whose node_modules holds `PACKAGES` (installed now if they are not yet)."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} is not installed (the MCP tests run npm packages)")
    specs = sorted(f"{name}@{version}" for name, version in PACKAGES.items())
    digest = hashlib.sha256(" ".join(specs).encode()).hexdigest()[:12]
    base = Path(os.environ.get("AGENTJOURNAL_NPM_CACHE") or tempfile.gettempdir())
    root = base / f"agentjournal-npm-{digest}"
    root.mkdir(parents=True, exist_ok=True)
    done = root / ".installed"
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time, the others wait for it
        if not done.exists():
            try:
                installed = subprocess.run(
                    ["npm", "install", "--prefix", str(root), "--no-audit", "--no-fund", *specs],
                    capture_output=True,
                    text=True,
                    timeout=INSTALL_SECONDS,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                _unavailable(f"npm install {' '.join(specs)} took over {INSTALL_SECONDS} s")
            if installed.returncode != 0:
                _unavailable(f"npm install {' '.join(specs)} failed: {installed.stderr[-2000:]}")
            done.write_text("\n".join(specs), encoding="utf-8")
    return root


def package_dir(name: str) -> Path:
    """Where package `name` (one of `PACKAGES`) is installed."""
    return npm_root() / "node_modules" / name
