"""Why a run failed: the known failures matched against the run's logs.

``diagnose(run_dir)`` reads stdout.log, torchrun's per-rank logs (logs/**/stderr.log,
stdout.log) and torchrun's error files (error.json, logs/**/error.json), and returns the first
matching entry of ``KNOWN`` (``lab.engine.supervise.failures``) as a ``Diagnosis``: a key, the
cause in one sentence, the fix, and where torchrun says so, the failed rank, its exit code and
the last lines of its traceback. Every diagnosis in status.json is a ``Diagnosis``
(``to_dict``), including the supervisor's own failures (``supervisor_failure``). A program that
exits 2 after argparse's ``usage:`` and ``prog: error: ...`` lines (a user's script given bad
arguments) is ``bad_input`` with that line. ``disk_full``'s cause names the folder and its free
space now (``lab.engine.supervise.diskfull``); a failure nothing explains on a (nearly) full disk
is one too."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from lab.engine.logs import PEER_LOST, RANK_FILES, rank_dirs, without_prefixes
from lab.engine.spec.diagnosis import Diagnosis
from lab.engine.supervise import diskfull
from lab.engine.supervise.failures import KNOWN
from lab.runfolder import ERROR_JSON, LOGS_DIR, SCRIPT, STDOUT_LOG
from lab.runrecords import read_run

_TAIL_BYTES = 256 * 1024
_EXCERPT_LINES = 12


_AROUND = ("port_in_use", "batch_split", "state_dict_prefix", "nan_loss")
# nothing specific found: a health finding may say more  # excerpt: the lines around the match, not
# a traceback
GENERIC = ("crashed", "rank_crashed", "unknown")

_BAD_INPUT = re.compile(r"^error: (.+)$", re.M)
# argparse's refusal: "usage: ..." then "<prog>: error: <what>", exit code 2 (torchrun's prefix
# allowed)
_USAGE = re.compile(r"^(?:\[default\d+\]:)?usage: ", re.M)
_ARGPARSE_ERROR = re.compile(r"^(?:\[default\d+\]:)?(\S+: error: .+)$", re.M)
_ROOT = re.compile(
    r"Root Cause \(first observed "
    r"failure\):.*?rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\).*?exitcode\s*:\s*(-?\d+)(.*?)(?:={10,}|\Z)",
    re.S,
)


# one entry of torchrun's failure summary ("[1]:" then time, host, rank, exitcode, traceback)
_ENTRY = re.compile(
    r"^\[\d+\]:\s*$.*?rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\).*?exitcode\s*:\s*(-?\d+)"
    r".*?(?=^\[\d+\]:\s*$|^-{10,}|^={10,}|\Z)",
    re.S | re.M,
)


def _root_cause(stdout: str, ranks: Mapping[int, str]) -> re.Match | None:
    """The entry of torchrun's last failure summary that began the failure.

    torchrun names the first failure it *observed*, and when the named root only lost its peer
    ("Connection reset/closed by peer"), the failure began elsewhere in the summary:
    - a rank that died of SIGKILL: when rank 1 is killed (-9) mid all-reduce, rank 0 may raise
      "Connection reset by peer" and exit before torchrun polls rank 1 (torchrun's own teardown
      signal is SIGTERM, -15, so it is never the one);
    - else a rank whose traceback shows an error of its own: when rank 0's all-reduce times out
      waiting for a stalled rank 1, rank 1 may wake to "Connection closed by peer" and exit
      first, and rank 0, still exiting, then shows torchrun's SIGTERM (-15) as its exit code.
    An entry is judged by its summary and its rank's own log (``ranks``, local rank -> text): a
    script without torchrun's ``@record`` shows no traceback in the summary."""

    def said(m: re.Match) -> str:
        return f"{m.group(0)}\n{ranks.get(int(m.group(2)), '')}"

    root = None
    for m in _ROOT.finditer(stdout):
        root = m
    code = int(root.group(3)) if root else 0
    # a root that died of a signal is its own story, except torchrun's teardown SIGTERM (-15): it
    # reaches a rank already failing because it lost its peer (a CI run: rank 0's "Connection
    # reset by peer" read -15 and came first by its error file's earlier second, rank 1 read -9)
    if root is None or (code < 0 and code != -15) or not PEER_LOST.search(said(root)):
        return root
    summary = stdout[: root.start()]
    start = summary.rfind("Failures:")
    if start < 0:
        return root
    entries = list(_ENTRY.finditer(summary, start))
    killed = [m for m in entries if int(m.group(3)) == -9]
    own = [
        m
        for m in entries
        if int(m.group(3)) != 0 and "Traceback" in said(m) and not PEER_LOST.search(said(m))
    ]
    return (killed or own or [root])[0]


def _read_tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _last_lines(text: str, n: int = _EXCERPT_LINES) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[-n:])


def _error_files(run_dir: Path) -> list[dict]:
    out = []
    for p in [run_dir / ERROR_JSON, *sorted((run_dir / LOGS_DIR).glob(f"**/{ERROR_JSON}"))]:
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        msg = data.get("message") if isinstance(data, dict) else None
        if isinstance(msg, dict):
            out.append(
                {
                    "text": f"{msg.get('message', '')}\n"
                    f"{msg.get('extraInfo', {}).get('py_callstack', '')}",
                    "rank": _int(data.get("rank")),
                }
            )
        elif isinstance(msg, str):
            out.append({"text": msg, "rank": _int(data.get("rank"))})
    return out


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _rank_logs(run_dir: Path) -> dict[int, str]:
    """local rank -> its stdout then stderr text (the traceback ends up last); latest attempt
    wins."""
    return {
        rank: "\n".join(_read_tail(d / name) for name in RANK_FILES)
        for rank, d in rank_dirs(run_dir).items()
    }


def _traceback_excerpt(text: str) -> str:
    """The last traceback in ``text`` (torchrun's own prefixes removed), else its last lines."""
    clean = without_prefixes(text)
    idx = clean.rfind("Traceback (most recent call last)")
    return _last_lines(clean[idx:] if idx >= 0 else clean)


def diagnose(run_dir: Path | str, exit_code: int | None = None) -> Diagnosis | None:
    """The known failure that best explains the run's logs, or None when nothing is found; its fix
    names the run (``lab logs <run id>``), ready to paste."""
    found = _diagnose(Path(run_dir), exit_code)
    if found is None or not found.fix:
        return found
    return replace(found, fix=named(found.fix, Path(run_dir).name))


def named(fix: str, run_id: str) -> str:
    """``fix`` with its placeholder run (``lab logs RUN``) replaced by ``run_id``."""
    return re.sub(r"\blab (logs|stop|stacks|status) RUN\b", rf"lab \1 {run_id}", fix)


def _diagnose(run_dir: Path, exit_code: int | None) -> Diagnosis | None:
    stdout = _read_tail(run_dir / STDOUT_LOG)
    ranks = _rank_logs(run_dir)
    errors = _error_files(run_dir)
    root = _root_cause(stdout, ranks)
    rank = int(root.group(1)) if root else None
    local = int(root.group(2)) if root else None
    code = int(root.group(3)) if root else exit_code
    if rank is None:
        for e in errors:
            if e["rank"] is not None:
                rank = e["rank"]
                break
    # the failed rank's own output first: it holds the real cause, the others only echo it
    rank_text = ranks.get(local if local is not None else rank, "") if rank is not None else ""
    sources = [rank_text, *(e["text"] for e in errors), stdout, *ranks.values()]
    everything = "\n".join(sources)
    focus = root.group(0) if root else everything
    src = rank_text or (errors[0]["text"] if errors else "") or stdout
    for key, pat, cause, fix in KNOWN:
        if key == "killed":
            hit = bool(pat.search(focus)) or (root is None and code == -9)
        else:
            hit = bool(pat.search(everything))
        if not hit:
            continue
        if key == "killed" and rank is not None:
            cause = f"Rank {rank} " + cause[0].lower() + cause[1:]
        if key == "disk_full":
            cause = diskfull.cause(run_dir, everything)
        if key in _AROUND:
            m = pat.search(src) or pat.search(everything)
            excerpt = _around(src if pat.search(src) else everything, m)  # type: ignore[arg-type]
        else:
            excerpt = _traceback_excerpt(src)
        return Diagnosis(key, cause, fix, rank, code, excerpt)
    refused = _argparse_refusal(run_dir, rank_text or stdout, rank, code) or _full(
        run_dir, everything, rank, code
    )
    if refused:
        return refused
    if root is not None or rank is not None:
        src = rank_text or (errors[0]["text"] if errors else stdout)
        excerpt = _traceback_excerpt(src)
        last = excerpt.splitlines()[-1] if excerpt else "no traceback recorded"
        return Diagnosis(
            "rank_crashed",
            f"Rank {rank} crashed with exit code {code}: {last}",
            f"Read rank {rank}'s traceback (python -m lab logs RUN --rank {rank}) and fix the "
            "error it names.",
            rank,
            code,
            excerpt,
        )
    if exit_code in (None, 0) and "Traceback" not in stdout:
        return None
    bad = _BAD_INPUT.findall(stdout)
    if bad:
        return Diagnosis(
            "bad_input",
            f"The trainer refused its input: {bad[-1]}",
            "Change the option the message names and launch again.",
            None,
            exit_code,
            bad[-1],
        )
    excerpt = _traceback_excerpt(stdout)
    last = excerpt.splitlines()[-1] if excerpt else "no output"
    return Diagnosis(
        "crashed",
        f"The training process exited with code {exit_code}: {last}",
        "Read the end of stdout.log (python -m lab logs RUN) and fix the error it names.",
        None,
        exit_code,
        excerpt,
    )


def _argparse_refusal(
    run_dir: Path, text: str, rank: int | None, code: int | None
) -> Diagnosis | None:
    """``bad_input`` with the ``prog: error: ...`` line of an argparse refusal (exit 2, after its
    usage line)."""
    found = _ARGPARSE_ERROR.findall(text) if code == 2 and _USAGE.search(text) else []
    if not found:
        return None
    who = "The script" if read_run(run_dir).kind == SCRIPT else "The program"
    return Diagnosis(
        "bad_input",
        f"{who} refused its arguments: {found[-1]}",
        "Change the arguments the message names (the script's arguments) and launch again.",
        rank,
        code,
        found[-1],
    )


def _full(run_dir: Path, text: str, rank: int | None, code: int | None) -> Diagnosis | None:
    """``disk_full`` for a failure no log line explains whose run folder's disk is (nearly) full:
    the last line may have found no room in the logs."""
    if code in (None, 0) or not diskfull.nearly_full(run_dir):
        return None
    fix = next(f for k, _, _, f in KNOWN if k == "disk_full")
    return Diagnosis(
        "disk_full", diskfull.cause(run_dir, text), fix, rank, code, _traceback_excerpt(text)
    )


def _around(text: str, m: re.Match[str], n: int = 3) -> str:
    lines = text.splitlines()
    at = text.count("\n", 0, m.start())
    return "\n".join(lines[max(0, at - n) : at + n + 1])
