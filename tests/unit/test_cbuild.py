"""cbuild and the C tree's Makefile: the small C programs built static with musl where it is, else
with glibc, else dynamic; a failed build replaces nothing. The compilers are fakes on PATH (the
subprocess boundary); the Makefile, make and the shell are the real ones."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from slurm_ipu import cbuild
from slurm_ipu.errors import ConfigError, SlurmIpuError
from slurm_ipu.hooks import transport

PT_INTERP = 3
TOOLS = ("mkdir", "mv", "rm", "cat", "cut", "sha256sum", "sed", "sh", "make")


def interpreter(path: Path) -> bool:
    """Whether an ELF64 program names a dynamic loader (a PT_INTERP header): not static."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return any(struct.unpack_from("<I", data, phoff + k * phentsize)[0] == PT_INTERP for k in range(phnum))


@pytest.fixture
def compilers(tmp_path, monkeypatch):
    """A PATH holding the tools the Makefile runs and the compilers a test names: each fake writes
    its output file (its name and whether -static, to tell which built it) or fails with the given
    message on stderr, and logs that it was tried."""
    bin_dir = tmp_path / "path"
    bin_dir.mkdir()
    for tool in TOOLS:
        os.symlink(shutil.which(tool), bin_dir / tool)
    monkeypatch.setenv("PATH", str(bin_dir))
    log = tmp_path / "tried"

    def install(outcomes: dict[str, str | None]) -> Path:
        for name, failure in outcomes.items():
            body = (f'echo "{failure}" >&2; for a; do [ "$prev" = -o ] && echo half > "$a"; prev=$a; done; exit 1'
                    if failure else
                    'for a; do [ "$prev" = -o ] && out=$a; prev=$a; done; '
                    f'case " $* " in *" -static "*) s=" -static";; esac; echo "{name}$s" > "$out"')
            script = bin_dir / name
            script.write_text(f'#!/bin/sh\ncase " $* " in *" -static "*) s=" -static";; esac\n'
                              f'echo "{name}$s" >> {log}\n{body}\n')
            script.chmod(0o755)
        return log

    return install


def test_musl_first_then_glibc_static(compilers, tmp_path):
    tried = compilers({"musl-gcc": "musl-gcc: cannot find crt1.o", "gcc": None})
    out = cbuild.make("hook", tmp_path / "bin" / "slurm-ipu-hook", "slurm-ipu-hook")
    assert out.read_text() == "gcc -static\n"
    assert tried.read_text().split("\n")[:2] == ["musl-gcc -static", "gcc -static"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["slurm-ipu-hook"]  # nothing left beside it


def test_dynamic_glibc_when_no_static_libc(compilers, tmp_path):
    compilers({"gcc": None, "musl-gcc": "ld: cannot find -lc"})
    (tmp_path / "path" / "gcc").write_text((tmp_path / "path" / "gcc").read_text().replace(
        'echo "gcc$s" >', '[ -n "$s" ] && { echo "ld: cannot find -lc" >&2; exit 1; }; echo "gcc$s" >'))
    out = cbuild.make("vipu-fast", tmp_path / "vipu-fast", "the lab's vipu", ['-DLAB_HOST="127.0.0.1"'])
    assert out.read_text() == "gcc\n"


def test_no_compiler_says_what_to_install_and_leaves_nothing(compilers, tmp_path):
    compilers({})
    with pytest.raises(SlurmIpuError, match=r"building slurm-ipu-hook .* no C compiler \(apt-get install gcc musl"):
        cbuild.make("hook", tmp_path / "x" / "slurm-ipu-hook", "slurm-ipu-hook")
    assert list((tmp_path / "x").iterdir()) == []


def test_no_make_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="make not found: it builds slurm-ipu-hook"):
        cbuild.make("hook", tmp_path / "slurm-ipu-hook", "slurm-ipu-hook")


def test_every_way_failing_names_the_error_and_replaces_nothing(compilers, tmp_path):
    compilers({"musl-gcc": "x.c:3: error: expected ';'", "gcc": "x.c:3: error: expected ';'"})
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "slurm-ipu-hook").write_text("the old build")
    with pytest.raises(SlurmIpuError, match=r"building slurm-ipu-hook .*failed: x\.c:3: error: expected ';'"):
        cbuild.make("hook", tmp_path / "x" / "slurm-ipu-hook", "slurm-ipu-hook")
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["slurm-ipu-hook"]
    assert (tmp_path / "x" / "slurm-ipu-hook").read_text() == "the old build"  # never replaced by a failure


def test_a_define_reaches_the_compiler_as_one_word(compilers, tmp_path):
    tried = compilers({"gcc": None})
    (tmp_path / "path" / "gcc").write_text((tmp_path / "path" / "gcc").read_text().replace(
        "\nfor a;", '\nprintf "%s\\n" "$@" > ' + str(tmp_path / "argv") + "\nfor a;", 1))
    cbuild.make("vipu-fast", tmp_path / "vipu-fast", "the lab's vipu", ['-DLAB_FALLBACK="/a dir/vipu-py"'])
    assert '-DLAB_FALLBACK="/a dir/vipu-py"' in (tmp_path / "argv").read_text().splitlines()
    assert tried.exists()


def test_the_hook_s_source_id_is_the_one_doctor_computes(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc missing: `make test` installs it")
    hook = transport.build_hook(tmp_path / "slurm-ipu-hook")
    check = subprocess.run([str(hook), "--check"], capture_output=True, text=True, timeout=10)
    assert check.returncode == 2 and "slurm-ipu-hook.conf" in check.stderr  # it runs: no settings beside it
    assert transport.source_id().encode() in hook.read_bytes()


@pytest.mark.skipif(shutil.which("musl-gcc") is None, reason="musl-tools missing: `make test` installs it")
def test_the_hook_is_built_static_with_musl(tmp_path):
    hook = transport.build_hook(tmp_path / "slurm-ipu-hook")
    assert not interpreter(hook)
    assert b"glibc" not in hook.read_bytes()  # glibc's static start-up names itself in its messages
    check = subprocess.run([str(hook), "--check"], capture_output=True, text=True, timeout=10)
    assert "slurm-ipu-hook.conf" in check.stderr  # it runs: no settings beside it, one line and exit 2
    assert check.returncode == 2


def test_a_relative_destination_is_the_caller_s_not_the_c_tree_s(compilers, tmp_path, monkeypatch):
    """The packages' build names debian/generated/slurm-ipu-hook, relative to the tree's root."""
    compilers({"gcc": None, "musl-gcc": "no"})
    monkeypatch.chdir(tmp_path)
    out = cbuild.make("hook", Path("generated") / "slurm-ipu-hook", "slurm-ipu-hook")
    assert out == tmp_path / "generated" / "slurm-ipu-hook" and out.read_text() == "gcc -static\n"
