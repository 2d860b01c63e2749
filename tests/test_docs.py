"""The README and the docs show only commands that exist: every ``lab SUBCOMMAND`` (or ``python -m
lab SUBCOMMAND``) in a code block or inline code names a real subcommand, and every ``--flag`` shown
with it is one of that subcommand's options, read from the parser the CLI itself builds
(``lab.cli.build_parser``); flags after a `` -- `` belong to the user's script and are skipped. In
docs/cli.md an inline code that starts with a subcommand (``sweep --dry-run``) is checked the same
way. Every relative link in README.md and docs/*.md resolves to a file, and an anchor to one of its
headings. In-process only: nothing is run."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from lab.cli import build_parser
from lab.runfolder import REPO_ROOT

README = REPO_ROOT / "README.md"
CLI_DOC = REPO_ROOT / "docs" / "cli.md"
# the pages whose commands are checked: the README, the CLI reference and the pages written with it
COMMAND_DOCS = [README, CLI_DOC] + [
    REPO_ROOT / "docs" / f"{name}.md"
    for name in ("guide", "slurm", "gpu", "testing", "benchmarks", "architecture")
]
LINK_DOCS = [README, *sorted((REPO_ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)*)`")
# a command starts a line or a span, or follows `&&`, `;` or `(`: "the lab runs" is prose
COMMAND = re.compile(r"(?:^|(?<=&& )|(?<=; )|(?<=\())(?:python -m lab|lab) +([A-Za-z][\w-]*)", re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def subcommand_options() -> dict[str, set[str]]:
    """Each subcommand's option strings, from the CLI's own parser."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name: {s for action in p._actions for s in action.option_strings}
        for name, p in sub.choices.items()
    }


def code_spans(text: str) -> list[str]:
    """The code a page shows: each line of its fenced blocks (a trailing backslash joins the next
    line), then its inline code with line breaks read as spaces."""
    spans: list[str] = []
    for block in FENCE.findall(text):
        spans += block.replace("\\\n", " ").splitlines()
    prose = FENCE.sub("", text)
    spans += [" ".join(m.split()) for m in INLINE.findall(prose)]
    return spans


def flags_of(segment: str) -> list[str]:
    """The long flags in one command's words, up to a `` -- `` (the script's own arguments) or a
    shell comment or a chained command."""
    out: list[str] = []
    for word in segment.split():
        if word in ("--", "#", "&&", ";", "||"):
            break
        word = word.lstrip("[(").rstrip("]),.…;")
        if word.startswith("--") and len(word) > 2:
            out.append(word.split("=", 1)[0])
    return out


def command_errors(span: str, options: dict[str, set[str]], bare: bool = False) -> list[str]:
    """What is wrong with the commands in one code span: an unknown subcommand, or a flag that
    subcommand does not take. ``bare``: the span may start with the subcommand itself."""
    found = [(m.group(1), span[m.end() :]) for m in COMMAND.finditer(span)]
    first = span.split(" ", 1)
    if bare and not found and first[0] in options and len(first) == 2 and "--" in first[1]:
        found = [(first[0], first[1])]
    errors: list[str] = []
    for name, rest in found:
        if name not in options:
            errors.append(f"{span!r}: no subcommand {name!r}")
            continue
        # the span's next command starts a new check
        nxt = COMMAND.search(rest)
        rest = rest[: nxt.start()] if nxt else rest
        for flag in flags_of(rest):
            if flag not in options[name]:
                errors.append(f"{span!r}: `{name}` takes no {flag}")
    return errors


def doc_command_errors(path: Path, options: dict[str, set[str]]) -> list[str]:
    bare = path == CLI_DOC
    errors: list[str] = []
    for span in code_spans(path.read_text()):
        errors += command_errors(span, options, bare=bare)
    return [f"{path.relative_to(REPO_ROOT)}: {e}" for e in errors]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out: set[str] = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        m = re.match(r"#{1,6} +(.*)", line)
        if m:
            base = slug(m.group(1))
            name, n = base, 0
            while name in out:
                n += 1
                name = f"{base}-{n}"
            out.add(name)
    return out


def link_errors(path: Path) -> list[str]:
    errors: list[str] = []
    for target in LINK.findall(FENCE.sub("", path.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not ours to check offline
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(REPO_ROOT)}: ({target})"
        if not dest.exists():
            errors.append(f"{where}: no file {file_part}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            errors.append(f"{where}: no heading #{anchor}")
    return errors


@pytest.fixture(scope="module")
def options() -> dict[str, set[str]]:
    return subcommand_options()


@pytest.mark.parametrize("path", COMMAND_DOCS, ids=lambda p: p.name)
def test_every_command_and_flag_shown_exists(path, options):
    assert path.exists(), path
    assert doc_command_errors(path, options) == []


def test_the_pages_show_commands_at_all(options):
    """The check reads something: the README's tour and every subcommand in docs/cli.md."""
    readme = {m.group(1) for s in code_spans(README.read_text()) for m in COMMAND.finditer(s)}
    assert {"status", "launch", "sweep", "compare", "models"} <= readme
    cli = {m.group(1) for s in code_spans(CLI_DOC.read_text()) for m in COMMAND.finditer(s)}
    assert cli == set(options)


@pytest.mark.parametrize(
    "span, wrong",
    [
        ("lab launch --mode ddp --made-up-flag 3", "`launch` takes no --made-up-flag"),
        ("python -m lab sweep --modes single,ddp --mode ddp", "`sweep` takes no --mode"),
        ("lab lunch --mode ddp", "no subcommand 'lunch'"),
        ("source .venv/bin/activate && lab status --follow", "`status` takes no --follow"),
        ("lab rm RUN && lab logs RUN --grace 3", "`logs` takes no --grace"),
    ],
)
def test_a_made_up_command_or_flag_is_caught(span, wrong, options):
    errors = command_errors(span, options)
    assert len(errors) == 1 and wrong in errors[0], errors


@pytest.mark.parametrize(
    "span",
    [
        "lab launch --script ./train.py --mode ddp --nproc 2 -- --epochs 3 --made-up 1",
        "lab launch --backend slurm --sbatch-arg=--qos=high",
        "lab compare RUN|SWEEP [--baseline RUN] [--json]   # --not-a-flag in a comment",
        "lab logs RUN --follow -n 50",
        "python -m lab.engine.supervise.supervisor --anything",
        "the lab runs it",
    ],
)
def test_what_is_not_a_lab_flag_is_left_alone(span, options):
    assert command_errors(span, options) == []


def test_inline_subcommand_in_the_cli_reference(options):
    assert command_errors("sweep --dry-run", options, bare=True) == []
    assert "takes no --dry-runs" in command_errors("sweep --dry-runs", options, bare=True)[0]
    # prose that happens to start with a subcommand's name, without flags, is not a command
    assert command_errors("stop RUN", options, bare=True) == []


@pytest.mark.parametrize("path", LINK_DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves(path):
    assert link_errors(path) == []


def test_a_broken_link_or_anchor_is_caught(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO_ROOT", tmp_path)
    (tmp_path / "other.md").write_text("# Other page\n\n## A lab on a shared server\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok](other.md#a-lab-on-a-shared-server) [web](https://example.org/x)\n"
        "[gone](missing.md) [bad anchor](other.md#nowhere) ![pic](pic.png)\n"
        "```\n[in code](not-checked.md)\n```\n"
    )
    errors = link_errors(page)
    assert len(errors) == 3, errors
    assert "no file missing.md" in errors[0]
    assert "no heading #nowhere" in errors[1]
    assert "no file pic.png" in errors[2]


def test_slugs_follow_github():
    assert slug("A lab on a shared server") == "a-lab-on-a-shared-server"
    assert slug("The command line: `lab`") == "the-command-line-lab"
    assert slug("The queue: runs wait for their devices") == "the-queue-runs-wait-for-their-devices"
