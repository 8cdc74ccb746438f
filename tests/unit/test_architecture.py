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


# What ipurun imports to plan and launch, and what it must never pull in: each of these costs
# milliseconds of start-up on every launch (dataclasses alone, with inspect and ast, ~15 ms).
LAUNCH_PATH = ("slurm_ipu.launcher.cli", "slurm_ipu.launcher.partition", "slurm_ipu.launcher.output",
               "slurm_ipu.vipu.client")
NOT_ON_THE_LAUNCH_PATH = ("dataclasses", "typing", "argparse", "yaml", "logging", "inspect", "copy", "pathlib",
                          "slurm_ipu.config", "slurm_ipu.emulator")


def test_ipurun_s_launch_path_imports_nothing_heavy():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    code = (f"import sys; sys.path.insert(0, {str(root)!r}); " + "; ".join(f"import {m}" for m in LAUNCH_PATH) +
            f"; print(' '.join(m for m in {NOT_ON_THE_LAUNCH_PATH!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []


def _module(dotted: list[str], root: Path = PKG.parent) -> str | None:
    """The module a dotted name is, as a file under root (a package is its __init__)."""
    path = root.joinpath(*dotted)
    if path.with_suffix(".py").is_file():
        return ".".join(dotted)
    if (path / "__init__.py").is_file():
        return ".".join(dotted)
    return None


def module_imports(path: Path, root: Path = PKG.parent) -> set[str]:
    """The modules of the package under root a module imports, at the top or lazily inside a
    function, in every form: `import p.m`, `from p import m`, `from p.m import f`, `from . import
    (a, m)`, `from .m import f`."""
    here = list(path.relative_to(root).with_suffix("").parts)[:-1]  # the module's package
    top = here[0] if here else path.stem
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.ImportFrom):
            base = (here[:len(here) - node.level + 1] if node.level else []) + \
                (node.module.split(".") if node.module else [])
            targets = [base + [a.name] for a in node.names] + [base]
        elif isinstance(node, ast.Import):
            targets = [a.name.split(".") for a in node.names]
        # each name of `from . import (a, b)` is a module of its own; `from .m import f` names m
        found = {m for target in targets[:-1] if target and target[0] == top and (m := _module(target, root))}
        if not found and targets and targets[-1] and targets[-1][0] == top:
            found = {m for m in [_module(targets[-1], root)] if m}
        out |= found
    return out


def circles(package: Path) -> list[str]:
    """Every import circle among the package's modules, as 'a -> b -> a'."""
    root = package.parent
    graph = {}
    for path in package.rglob("*.py"):
        name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        graph[name] = module_imports(path, root) - {name}
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_circle_check_sees_every_name_of_a_from_import():
    """`from . import (jobenv, prolog, removal)` is three arrows: a check that kept only the first
    passed with a circle through the second (transport -> prolog -> health -> reap -> transport)."""
    seen = module_imports(PKG / "hooks" / "transport.py")
    assert {"slurm_ipu.hooks.jobenv", "slurm_ipu.hooks.prolog", "slurm_ipu.hooks.removal"} <= seen, seen
    assert "slurm_ipu.hooks" not in seen  # the package itself is no arrow when its modules are named


def test_no_import_circle_in_the_package():
    """Not even through imports inside functions: a circle hides which module is the lower one."""
    assert circles(PKG) == []


# The guard's own test: a planted circle of two modules, a -> b -> a, with b's arrow back written
# in each form Python has. A checker that misses one would pass a real circle of that form.
FORMS = {
    "from-dot": "from . import a",
    "from-dot-names": "from . import (c, a)",
    "from-dot-module": "from .a import f",
    "from-package": "from planted import a",
    "import-dotted": "import planted.a",
    "from-package-module": "from planted.a import f",
    "inside-a-function": "def g():\n    from . import a\n    return a",
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_circle_check_finds_a_planted_circle_in_each_import_form(tmp_path, form):
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n\n\ndef f():\n    return b\n")
    (package / "c.py").write_text("")
    (package / "b.py").write_text(FORMS[form] + "\n")
    assert circles(package) == ["planted.a -> planted.b -> planted.a"]
    (package / "b.py").write_text("from . import c\n")  # the arrow back removed: no circle
    assert circles(package) == []


# Slurm's query and control commands, and V-IPU's: run only by their one interface each.
SLURM_TOOLS = {"scontrol", "squeue", "sinfo", "sacct", "sacctmgr", "sbatch", "scancel", "sreport"}
OWNERS = {"scontrol": "slurm/commands.py", "vipu": "vipu/client.py"}


def _with_parents(tree):
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child.parent = node
    return tree


@pytest.mark.parametrize("path", sorted(p for p in PKG.rglob("*.py") if "emulator" not in p.parts),
                         ids=lambda p: str(p.relative_to(PKG)))
def test_slurm_and_vipu_commands_run_through_their_interface(path):
    """Every Slurm command the product runs goes through slurm/commands.py
    (SlurmCli), every vipu call through vipu/client.py (VipuClient). A module may name a tool as
    the first argument of SlurmCli.output (the words after it are the caller's)."""
    rel = str(path.relative_to(PKG))
    if rel in OWNERS.values():
        return
    stray = hand_built_commands(path.read_text())
    assert not stray, f"{rel} runs {', '.join(stray)} itself: use SlurmCli / VipuClient"


def hand_built_commands(source: str) -> list[str]:
    """Argv lists a module builds for a Slurm tool or vipu (`["scontrol", "show", ...]`); a bare
    `["vipu"]` is a command name handed to VipuClient, not a call."""
    stray = []
    for node in ast.walk(_with_parents(ast.parse(source))):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        parent = node.parent
        if node.value in SLURM_TOOLS and isinstance(parent, (ast.List, ast.Tuple)):
            stray.append(f"{node.value} (line {node.lineno})")
        elif node.value == "vipu" and isinstance(parent, ast.List) and parent.elts[0] is node and len(parent.elts) > 1:
            stray.append(f"vipu (line {node.lineno})")
    return stray


def test_the_command_checker_sees_hand_built_argv():
    assert hand_built_commands('subprocess.run(["scontrol", "show", "topology"])') == ["scontrol (line 1)"]
    assert hand_built_commands('run(["vipu", "list", "partitions"])') == ["vipu (line 1)"]
    assert hand_built_commands('cli.output("squeue", "--json"); c = ["vipu"]') == []
