"""The project's habits (CONTRIBUTING.md) held by tests, not by memory: commit subjects a newcomer
reads in `git log --oneline`, no tracker numbers, no file too long to read."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The subjects before this commit are history (some run to paragraphs); from it on, the rule holds.
SINCE = "b68efbe6a844b3c2c46a911dc4bef7ba8140f2ce"
SUBJECT_MAX = 71
TRACKER = re.compile(r"\bissues?\s+#?[0-9]", re.I)
LINES_MAX = 600


def git(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)


def tracked() -> list[Path]:
    proc = git("ls-files", "-z")
    return [ROOT / name for name in proc.stdout.split("\0") if name]


def test_commit_subjects_are_under_72_characters():
    known = git("cat-file", "-e", f"{SINCE}^{{commit}}")
    if known.returncode != 0:
        pytest.skip("a shallow clone: the history this test reads is not here")
    subjects = git("log", "--format=%h %s", f"{SINCE}^..HEAD").stdout.splitlines()
    assert subjects, "git log read nothing"
    long = [line for line in subjects if len(line.split(" ", 1)[1]) > SUBJECT_MAX]
    assert not long, f"subjects over {SUBJECT_MAX} characters (put the why in the body): {long}"


def test_no_tracker_numbers_in_code_tests_or_docs():
    found = [f"{path.relative_to(ROOT)}:{n}" for path in tracked() if path.is_file()
             for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if TRACKER.search(line)]
    assert not found, f"say the reason, not the tracker's number: {found}"


def test_no_source_file_is_too_long_to_read():
    sources = [p for p in tracked() if p.suffix in (".py", ".c", ".h", ".j2", ".sh", ".md") and p.is_file()]
    assert len(sources) > 100
    long = [f"{p.relative_to(ROOT)} ({n})" for p in sources if (n := len(p.read_bytes().splitlines())) > LINES_MAX]
    assert not long, f"files over {LINES_MAX} lines: split them by responsibility: {long}"
