"""The package shows the architecture, and its arrows go one way: the launcher and the hooks
reach V-IPU through the V-IPU client; nothing in production imports the emulator or the lab."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "slurm_ipu"

# package -> the slurm_ipu packages it must never import (directly, or lazily inside a function)
FORBIDDEN = {
    "vipu": {"hooks", "launcher", "deploy", "lab", "emulator"},
    "slurm": {"hooks", "launcher", "deploy", "lab", "emulator", "vipu"},
    "hooks": {"launcher", "deploy", "lab", "emulator"},
    "launcher": {"hooks", "deploy", "lab", "emulator"},
    "deploy": {"launcher", "lab", "emulator"},
    "emulator": {"hooks", "launcher", "deploy", "lab"},
}


def imported(path: Path) -> set[str]:
    """The slurm_ipu subpackages (first component) a module imports, absolute or relative."""
    parts = path.relative_to(PKG.parent).with_suffix("").parts  # ('slurm_ipu', 'hooks', 'prolog')
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(parts[:-node.level])  # __init__ is a part too: level 1 is the package
                target = base + (node.module.split(".") if node.module else [])
                names = [target + [a.name] for a in node.names] if not node.module else [target]
            else:
                names = [node.module.split(".")] if node.module else []
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        else:
            continue
        for name in names:
            if len(name) > 1 and name[0] == "slurm_ipu":
                out.add(name[1])
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_go_one_way(package):
    bad = {}
    for path in sorted((PKG / package).rglob("*.py")):
        wrong = imported(path) & FORBIDDEN[package]
        if wrong:
            bad[str(path.relative_to(PKG))] = sorted(wrong)
    assert bad == {}


def test_the_checker_sees_relative_imports():
    sample = PKG / "hooks" / "prolog.py"
    assert {"errors", "rules", "hooks"} <= imported(sample)
