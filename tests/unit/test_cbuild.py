"""cbuild: the small C programs built static with musl where it is, else with glibc, else dynamic."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from slurm_ipu import cbuild
from slurm_ipu.errors import ConfigError, SlurmIpuError
from slurm_ipu.hooks import transport

PT_INTERP = 3


def interpreter(path: Path) -> bool:
    """Whether an ELF64 program names a dynamic loader (a PT_INTERP header): not static."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return any(struct.unpack_from("<I", data, phoff + k * phentsize)[0] == PT_INTERP for k in range(phnum))


def fake_compilers(mocker, outcomes: dict[str, str | None]):
    """which() finds the compilers named; each run writes its output file (the compiler's name and
    flags, to tell which built it) or fails with the given message."""
    mocker.patch.object(cbuild.shutil, "which",
                        side_effect=lambda name: f"/usr/bin/{name}" if name in outcomes else None)
    tried = []

    def run(argv, **_):
        key = " ".join(a for a in argv if a in ("/usr/bin/musl-gcc", "/usr/bin/gcc", "-static"))
        tried.append(key)
        failure = outcomes[argv[0].rsplit("/", 1)[1]] if key != "/usr/bin/gcc" else None
        if failure:
            return subprocess.CompletedProcess(argv, 1, "", failure)
        Path(argv[argv.index("-o") + 1]).write_text(key)
        return subprocess.CompletedProcess(argv, 0, "", "")

    mocker.patch.object(cbuild.subprocess, "run", side_effect=run)
    return tried


def test_musl_first_then_glibc_static(mocker, tmp_path):
    tried = fake_compilers(mocker, {"musl-gcc": "musl-gcc: cannot find crt1.o", "gcc": None})
    out = cbuild.build(tmp_path / "x.c", tmp_path / "bin" / "x", ["-DX=1"], "x")
    assert out.read_text() == "/usr/bin/gcc -static"
    assert tried == ["/usr/bin/musl-gcc -static", "/usr/bin/gcc -static"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["x"]  # no temporary left beside it


def test_dynamic_glibc_when_no_static_libc(mocker, tmp_path):
    fake_compilers(mocker, {"gcc": "ld: cannot find -lc"})
    out = cbuild.build(tmp_path / "x.c", tmp_path / "x", [], "x")
    assert out.read_text() == "/usr/bin/gcc"


def test_no_compiler_is_a_config_error(mocker, tmp_path):
    fake_compilers(mocker, {})
    with pytest.raises(ConfigError, match="gcc not found: it builds slurm-ipu-hook"):
        cbuild.build(tmp_path / "x.c", tmp_path / "x", [], "slurm-ipu-hook")


def test_every_way_failing_names_the_source_and_leaves_nothing(mocker, tmp_path):
    mocker.patch.object(cbuild.shutil, "which", return_value="/usr/bin/gcc")

    def failing(argv, **_):
        Path(argv[argv.index("-o") + 1]).write_text("half an output")  # as a linker may leave
        return subprocess.CompletedProcess(argv, 1, "", "x.c:3: error: expected ';'")

    mocker.patch.object(cbuild.subprocess, "run", side_effect=failing)
    (tmp_path / "x").write_text("the old build")
    with pytest.raises(SlurmIpuError, match=r"building x from .*x\.c failed: x\.c:3: error: expected ';'"):
        cbuild.build(tmp_path / "x.c", tmp_path / "x", [], "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]
    assert (tmp_path / "x").read_text() == "the old build"  # a failed build never replaces a working one


@pytest.mark.skipif(shutil.which("musl-gcc") is None, reason="musl-tools missing: `make test` installs it")
def test_the_hook_is_built_static_with_musl(tmp_path):
    hook = transport.build_hook(tmp_path / "slurm-ipu-hook")
    assert not interpreter(hook)
    assert b"glibc" not in hook.read_bytes()  # glibc's static start-up names itself in its messages
    check = subprocess.run([str(hook), "--check"], capture_output=True, text=True, timeout=10)
    assert "slurm-ipu-hook.conf" in check.stderr  # it runs: no settings beside it, one line and exit 2
    assert check.returncode == 2
