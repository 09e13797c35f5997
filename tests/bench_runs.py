"""A benchmark's smoke run from a test (`bench/<script> --quick`, in a fresh interpreter), and a
benchmark script loaded as a module, for the checks it defines."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run_quick(
    script: str, directory: Path, *, timeout: float = 240, env: Mapping[str, str] | None = None
) -> str:
    """Run `bench/<script> --quick --dir <directory>` and give its output; a failed run fails
    the test with the script's stderr."""
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--quick", "--dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def bench_module(script: str) -> ModuleType:
    """`bench/<script>` loaded as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(Path(script).stem, BENCH / script)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
