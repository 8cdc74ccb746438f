"""slurm-ipu(1) and ipurun(1) for `make install`, from the commands' own help:
the options are declared once (slurm-ipu's argparse tree, ipurun's option table in
launcher/options.py), so a page cannot drift from `--help`. The Debian packages make theirs with
help2man from the same help (templates/debian/rules); `make install` needs no help2man.

`python -m slurm_ipu.manpages DIR` writes them into DIR; `make install` then puts them beside
BINDIR's links, in BINDIR/../share/man/man1 (man finds a page there for a command on PATH:
/usr/local/bin -> /usr/local/share/man), listed in the install's manifest (deploy/install.py, which
may not import the commands it documents: hence a step of its own).
"""

from __future__ import annotations

from . import __version__

WHAT = {"slurm-ipu": "set up and check slurm-ipu on a Slurm cluster and see its IPUs",
        "ipurun": "launch PopRun-style multi-instance IPU programs with srun"}
SEE_ALSO = {"slurm-ipu": "ipurun(1), srun(1), sbatch(1), slurm.conf(5)",
            "ipurun": "slurm-ipu(1), srun(1), salloc(1)"}


def _escape(line: str) -> str:
    """A line of help as roff text: backslashes kept, a leading dot or quote not read as a request."""
    line = line.replace("\\", "\\e")
    return "\\&" + line if line.startswith((".", "'")) else line


def page(name: str, sections: list[tuple[str, str]]) -> str:
    """A man page of section 1: NAME, then each (heading, preformatted help text), then SEE ALSO."""
    out = [f'.TH {name.upper()} 1 "" "slurm-ipu {__version__}" "User Commands"',
           ".SH NAME", f"{name} \\- {WHAT[name]}"]
    for heading, text in sections:
        out += [f".SH {heading}", ".nf", *map(_escape, text.rstrip("\n").splitlines()), ".fi"]
    out += [".SH SEE ALSO", SEE_ALSO[name], ""]
    return "\n".join(out)


def slurm_ipu_sections() -> list[tuple[str, str]]:
    """The top-level help, then each command's (argparse's own text, at a fixed width)."""
    import argparse
    import os

    from .cli import build_parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"  # argparse wraps at the terminal's width: the page must not depend on it
    try:
        top = build_parser()
        out = [("DESCRIPTION", top.format_help())]
        sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
        out += [(f"slurm-ipu {cmd}".upper(), parser.format_help()) for cmd, parser in sub.choices.items()]
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return out


def ipurun_sections() -> list[tuple[str, str]]:
    from .launcher.options import usage

    return [("DESCRIPTION", usage())]


def pages() -> dict[str, str]:
    """File name -> the page."""
    return {"slurm-ipu.1": page("slurm-ipu", slurm_ipu_sections()), "ipurun.1": page("ipurun", ipurun_sections())}


def main(argv: list[str] | None = None) -> int:
    import sys
    from pathlib import Path

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python -m slurm_ipu.manpages DIR (an existing directory)", file=sys.stderr)
        return 2
    for name, text in pages().items():
        (Path(args[0]) / name).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
