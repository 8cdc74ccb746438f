"""ipurun's output from srun: every instance's lines as the instance wrote them. srun's --label
(which ipurun needs to tell instances apart) ends each 1024-byte message slurmstepd sends with a
newline of its own, so a long line arrived in pieces (a JSON record, a progress bar). The fake srun
here prints exactly what srun prints for such lines (src/common/write_labelled_message.c)."""

from __future__ import annotations

import sys

import pytest

from slurm_ipu.launcher import output

PIECE = output.SRUN_PIECE


def as_srun_prints(task: int, line: bytes) -> bytes:
    """One line of a task's output as srun --label prints it: 1024-byte pieces, each labelled."""
    pieces = [line[i:i + PIECE] for i in range(0, len(line), PIECE)] or [b""]
    if len(line) % PIECE == 0 and line:
        pieces.append(b"")  # the newline after a line of whole pieces: a message of its own
    return b"".join(b"%d: %s\n" % (task, p) for p in pieces)


def fake_srun(tmp_path, printed: bytes, err: bytes = b"") -> list[str]:
    (tmp_path / "out").write_bytes(printed)
    (tmp_path / "err").write_bytes(err)
    script = tmp_path / "srun"
    script.write_text(f"#!/bin/sh\ncat {tmp_path}/out\ncat {tmp_path}/err >&2\n")
    script.chmod(0o755)
    return [str(script)]


@pytest.mark.parametrize("length", [10, PIECE - 1, PIECE, PIECE + 1, 3 * PIECE + 17, 5000])
def test_a_long_line_comes_out_whole(tmp_path, capfd, length):
    line = (b"x" * (length - 1) + b"!")[:length]
    other = b"task 1 says hello"
    printed = as_srun_prints(0, line)
    first = len(b"0: ") + min(PIECE, length) + 1  # another instance's line after the first piece
    printed = printed[:first] + as_srun_prints(1, other) + printed[first:]
    rc = output.run_srun(fake_srun(tmp_path, printed), {"PATH": "/usr/bin:/bin"}, output.Output(tag=False))
    out = capfd.readouterr().out.splitlines()
    assert rc == 0 and sorted(out) == sorted([line.decode(), other.decode()]), [len(x) for x in out]


def test_a_character_cut_between_pieces_is_whole_again(tmp_path, capfd):
    line = ("é" * 700).encode()  # 1400 bytes: the first piece ends inside a character
    rc = output.run_srun(fake_srun(tmp_path, as_srun_prints(3, line)), {"PATH": "/usr/bin:/bin"},
                         output.Output(tag=True))
    assert rc == 0 and capfd.readouterr().out == f"[1,3]<stdout>:{'é' * 700}\n"


def test_stderr_and_srun_s_own_lines_are_kept_apart(tmp_path, capfd):
    line = b"e" * 2000
    err = as_srun_prints(0, line) + b"srun: error: node1: task 0: Exited with exit code 3\n"
    out = output.Output(tag=False)
    output.run_srun(fake_srun(tmp_path, as_srun_prints(0, b"ok"), err), {"PATH": "/usr/bin:/bin"}, out)
    seen = capfd.readouterr()
    assert seen.out == "ok\n" and seen.err.splitlines()[:2] == [
        "e" * 2000, "srun: error: node1: task 0: Exited with exit code 3"]
    assert out.tails[0] == ["ok", "e" * 2000]  # the instance's last lines, for a failure's report


def test_a_piece_left_at_the_end_is_not_lost(tmp_path, capfd):
    printed = b"0: " + b"z" * PIECE + b"\n"  # the task ended with no newline after 1024 bytes
    output.run_srun(fake_srun(tmp_path, printed), {"PATH": "/usr/bin:/bin"}, output.Output(tag=False))
    assert capfd.readouterr().out == "z" * PIECE + "\n"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
