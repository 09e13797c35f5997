"""The README's examples run as written, and it shows the two commands a newcomer needs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

README = Path(__file__).parent.parent / "README.md"


def test_readme_first_screen_has_the_two_commands() -> None:
    first_screen = README.read_text(encoding="utf-8").splitlines()[:30]
    assert any("make demo" in line for line in first_screen)
    assert any("make test" in line for line in first_screen)


@pytest.mark.parametrize(
    "block", re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
)
def test_readme_python_examples_run(block: str, tmp_path: Path) -> None:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(block, str(README), "exec"), {})
    finally:
        os.chdir(cwd)
    assert (tmp_path / "agent.db").exists()
