"""tests/hang_guard.py: a hung test fails at its limit with the stuck task's stack, and the run goes on."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

HUNG = textwrap.dedent('''
    import asyncio
    import pytest

    async def wait_for_nobody(event: asyncio.Event) -> None:
        await event.wait()

    @pytest.mark.hang_limit(1)
    async def test_hangs() -> None:
        await wait_for_nobody(asyncio.Event())

    @pytest.mark.hang_limit(1)
    def test_hangs_in_a_thread_wait() -> None:
        import threading
        threading.Event().wait()

    @pytest.fixture
    def slow_to_start() -> None:
        import threading
        threading.Event().wait()

    @pytest.mark.hang_limit(300, setup=1)
    def test_setup_hangs(slow_to_start: None) -> None:
        assert True

    def test_after() -> None:
        assert True
''')


def test_a_hung_test_fails_with_its_stack_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "test_hung.py").write_text(HUNG)
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.hang_guard", "-p", "no:cacheprovider", "-q",
         "-o", "asyncio_mode=auto", "-o", "markers=hang_limit", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=root, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "2 failed, 1 passed, 1 error" in out, out
    assert "call of test_hung.py::test_hangs hung for 1s" in out, out
    assert "in wait_for_nobody" in out, out  # the stuck coroutine's frame, from the task dump
    assert "call of test_hung.py::test_hangs_in_a_thread_wait hung for 1s" in out, out
    assert "setup of test_hung.py::test_setup_hangs hung for 1s" in out, out  # hang_limit(setup=...): setup only
