"""The sample outputs of README.md: shell sessions in ```bash blocks, checked against what the commands print.

A session is a ```bash block whose lines start with ``$ ``: each command is followed by the lines it
prints (its sample output). A trailing comment (two spaces, then ``#``) is the reader's note, not output;
``...`` in a sample line stands for any text. The commands run in a scratch copy of ``examples/`` (they may
write files), with ``hybrid`` run as ``python -m hybrid_cli``, stdout and stderr together.

    python -m tests.support.readme_samples            # check: prints each difference, exit 1 on any
    python -m tests.support.readme_samples --write    # rewrite the samples' figures from today's output

tests/e2e/test_readme_samples.py runs the check, so a sample cannot go stale.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from tests.support import ROOT

DOCUMENT = "README.md"
_COMMENT = re.compile(r"\s{2,}#.*$")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@dataclass
class Command:
    """One ``$ command`` of a session and the sample lines under it."""

    line: int
    """0-based line of the command in the document."""
    text: str
    """The command, without its prompt and comment."""
    samples: list[tuple[int, str]] = field(default_factory=list)
    """(0-based document line, the sample without its comment)."""


def sessions(path: str = DOCUMENT) -> tuple[list[str], list[Command]]:
    """The document's lines and every command of its shell sessions."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().splitlines()
    commands: list[Command] = []
    in_bash = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("```"):
            in_bash = not in_bash and stripped[3:].strip() in ("bash", "console", "shell")
            continue
        if not in_bash:
            continue
        if line.startswith("$ "):
            commands.append(Command(i, _COMMENT.sub("", line[2:]).strip()))
        elif commands and commands[-1].line < i and stripped:
            commands[-1].samples.append((i, _COMMENT.sub("", line).rstrip()))
    # Sessions only: a block of bare commands has no samples to check.
    return lines, [c for c in commands if c.samples]


def run(command: str, cwd: str) -> list[str]:
    """The command's output lines (stdout and stderr as they interleave)."""
    argv = shlex.split(command)
    if argv[0] == "hybrid":
        argv = [sys.executable, "-m", "hybrid_cli", *argv[1:]]
    elif argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    out = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
                         env=env)
    if out.returncode != 0:
        raise RuntimeError(f"`{command}` exited with {out.returncode}:\n{out.stdout[-3000:]}")
    return out.stdout.splitlines()


def _pattern(sample: str) -> re.Pattern:
    """The sample's line with each of its numbers a group (compared by :func:`_same_figures`)."""
    def part(text: str) -> str:
        pieces = _NUMBER.split(text.strip())
        return "(\\d+(?:\\.\\d+)?)".join(re.escape(p) for p in pieces)

    return re.compile(r"\s*" + r".*".join(part(p) for p in sample.split("...")) + r"\s*$")


SIGNIFICANT_FOR_ROUNDING = 6
"""A computed figure printed with this many significant digits or more (a loss to 6 decimals) is float32 at its
last digit: another CPU sums in another order, so it may print one unit away there and still agree."""


def _same_figures(sample: str, match: re.Match) -> bool:
    for want, got in zip(_NUMBER.findall(sample), match.groups()):
        if want == got:
            continue
        digits = len(want.replace(".", "").lstrip("0"))
        decimals = len(want.partition(".")[2])
        if (digits < SIGNIFICANT_FOR_ROUNDING or decimals != len(got.partition(".")[2])
                or abs(float(want) - float(got)) > 1.5 * 10.0 ** -decimals):
            return False
    return True


def _shape(text: str) -> str:
    return _NUMBER.sub("#", text.split("...")[0]).strip()


def compare(command: Command, output: list[str]) -> list[tuple[int, str, str | None]]:
    """(document line, sample, the line the command prints instead or None) for each sample the output does not
    show, in order."""
    problems = []
    position = 0
    for line, sample in command.samples:
        pattern = _pattern(sample)
        found = next((k for k in range(position, len(output))
                      if (m := pattern.match(output[k])) and _same_figures(sample, m)), None)
        if found is not None:
            position = found + 1
            continue
        shape = _shape(sample)
        instead = next((output[k] for k in range(position, len(output)) if _shape(output[k]).startswith(shape)),
                       None)
        problems.append((line, sample, instead))
    return problems


def _with_figures(sample: str, printed: str) -> str:
    """The sample with the printed line's numbers (its text, its elisions and its place kept)."""
    numbers = iter(_NUMBER.findall(printed))
    head, sep, tail = sample.partition("...")
    return _NUMBER.sub(lambda m: next(numbers, m.group(0)), head) + sep + tail


def check(write: bool = False, path: str = DOCUMENT) -> list[str]:
    """Differences between the document's samples and today's output (rewritten in place with ``write``)."""
    lines, commands = sessions(path)
    messages = []
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copytree(os.path.join(ROOT, "examples"), os.path.join(scratch, "examples"))
        for command in commands:
            for line, sample, instead in compare(command, run(command.text, scratch)):
                if write and instead is not None:
                    original = lines[line]
                    comment = original[len(_COMMENT.sub("", original)):]
                    lines[line] = _with_figures(sample, instead).ljust(len(sample)) + comment
                    continue
                messages.append(f"{path}:{line + 1}: `{command.text}` prints "
                                + (f"{instead.strip()!r}" if instead is not None else "no such line")
                                + f", the sample says {sample.strip()!r}")
    if write:
        with open(os.path.join(ROOT, path), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return messages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the samples' figures from today's output")
    args = parser.parse_args(argv)
    messages = check(write=args.write)
    for m in messages:
        print(m)
    return 1 if messages else 0


if __name__ == "__main__":
    raise SystemExit(main())
