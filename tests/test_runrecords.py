"""lab/runrecords.py: each record's one reader takes a whole file's fields, and a missing, torn,
non-object or older file (or a field of the wrong type) as absent, never raising."""

from __future__ import annotations

import json

import pytest

from lab.runfolder import RUN_JSON, STATUS_JSON, SUMMARY_JSON
from lab.runrecords import (
    RunFile,
    StatusFile,
    SummaryFile,
    holds_run_files,
    read_progress,
    read_run,
    read_status,
    read_summary,
)

READERS = [(RUN_JSON, read_run, RunFile), (STATUS_JSON, read_status, StatusFile)]
READERS += [(SUMMARY_JSON, read_summary, SummaryFile)]


@pytest.mark.parametrize("name,read,empty", READERS)
@pytest.mark.parametrize("text", [None, "", '{"state": "runn', "[1, 2]", "null", "\x00\x01"])
def test_a_missing_torn_or_non_object_file_is_a_record_not_found(tmp_path, name, read, empty, text):
    if text is not None:
        (tmp_path / name).write_text(text)
    for kept in (False, True):
        got = read(tmp_path, kept=kept)
        assert got == empty() and not got.found and got.data == {}


def test_run_json_fields(tmp_path):
    run = {
        "run_id": "r1",
        "name": "n",
        "config": {"mode": "ddp", "gpus": [0, 1], "nproc": 2},
        "env": {"OMP_NUM_THREADS": "1"},
        "created_at": "2026-11-29T07:45:00+00:00",
        "host": "h",
        "recorded_on": "CPU (gloo)",
        "sweep_id": "sweep-1",
        "kind": "script",
        "cwd": "/w",
        "resumed_from": "r0",
        "scaling": "strong",
        "varied": {"bucket-cap-mb": 25.0},
        "exclusive": True,
    }
    (tmp_path / RUN_JSON).write_text(json.dumps(run))
    got = read_run(tmp_path)
    assert got.found and got.data == run
    assert (got.name, got.config, got.env, got.gpus) == ("n", run["config"], run["env"], [0, 1])
    assert (got.created_at, got.host, got.recorded_on) == (run["created_at"], "h", "CPU (gloo)")
    assert (got.sweep_id, got.kind, got.cwd, got.resumed_from) == ("sweep-1", "script", "/w", "r0")
    assert (got.scaling, got.varied) == ("strong", {"bucket-cap-mb": 25.0})
    assert got.exclusive and not got.wait_for_idle


def test_an_older_or_damaged_run_json_reads_its_odd_fields_as_absent(tmp_path):
    # a trainer run has no kind; a field of the wrong type is not passed on to be .get()-ed
    (tmp_path / RUN_JSON).write_text(json.dumps({"name": None, "config": [1], "env": "x"}))
    got = read_run(tmp_path)
    assert got.found and got.kind is None and got.name == ""
    assert got.config is None and got.env == {} and got.gpus == [] and got.varied is None


def test_status_json_fields_and_odd_ones(tmp_path):
    st = {
        "state": "running",
        "supervisor_pid": 12,
        "pid": 34,
        "pid_ct": 5.0,
        "tree": [[34, 5.0]],
        "diagnosis": {"key": "cuda_oom"},
        "health": [{"key": "stalled"}],
        "slurm": {"state": "RUNNING"},
        "events_dirs": ["/a/tb"],
    }
    (tmp_path / STATUS_JSON).write_text(json.dumps(st))
    got = read_status(tmp_path)
    assert (got.state, got.supervisor_pid, got.pid, got.pid_ct) == ("running", 12, 34, 5.0)
    assert got.tree == [[34, 5.0]] and got.diagnosis == {"key": "cuda_oom"}
    assert got.health == [{"key": "stalled"}] and got.slurm == {"state": "RUNNING"}
    assert got.events_dirs == ["/a/tb"] and got.restarts == [] and got.data == st
    # before events_dirs were recorded (None, not []: the registry then looks for tb/)
    (tmp_path / STATUS_JSON).write_text(json.dumps({"state": "failed", "diagnosis": "x"}))
    old = read_status(tmp_path)
    assert old.events_dirs is None and old.diagnosis is None and old.tree == []


def test_summary_json_and_its_throughput(tmp_path):
    assert read_summary(tmp_path).throughput_samples_per_sec is None
    (tmp_path / SUMMARY_JSON).write_text(
        json.dumps({"completed": True, "mode": "dp", "throughput": {"median": 12.5}})
    )
    got = read_summary(tmp_path)
    assert got.completed and got.mode == "dp" and got.throughput_samples_per_sec == 12.5
    # an older summary: the flat figure; a non-positive one is no figure
    (tmp_path / SUMMARY_JSON).write_text(json.dumps({"steady_throughput_samples_per_sec": 7}))
    assert read_summary(tmp_path).throughput_samples_per_sec == 7.0
    (tmp_path / SUMMARY_JSON).write_text(json.dumps({"throughput": {"median": 0}}))
    assert read_summary(tmp_path).throughput_samples_per_sec is None


def test_progress_and_what_makes_a_folder_a_run(tmp_path):
    assert read_progress(tmp_path) is None and not holds_run_files(tmp_path)
    (tmp_path / "progress.json").write_text('{"step": 3}')
    assert read_progress(tmp_path) == {"step": 3}
    assert not holds_run_files(tmp_path)  # progress alone: not one of the run's records
    (tmp_path / SUMMARY_JSON).write_text("{}")
    assert holds_run_files(tmp_path)


# -- the records are read only here --------------------------------------------------------------
RECORD_NAMES = {"RUN_JSON", "STATUS_JSON", "SUMMARY_JSON", "PROGRESS_JSON"}
RECORD_FILES = {"run.json", "status.json", "summary.json", "progress.json"}
OWN = {"lab/runfolder.py", "lab/runrecords.py"}


def record_reads(source: str) -> list[int]:
    """The lines of ``source`` that call ``read_json``/``read_json_kept`` on a run record's file
    (named by its constant or spelled out) instead of the record's reader."""
    import ast

    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if called not in ("read_json", "read_json_kept"):
            continue
        inner = [n for a in node.args for n in ast.walk(a)]
        if any(isinstance(n, ast.Name) and n.id in RECORD_NAMES for n in inner) or any(
            isinstance(n, ast.Constant) and n.value in RECORD_FILES for n in inner
        ):
            out.append(node.lineno)
    return out


def test_run_records_are_read_only_through_their_readers():
    from lab.runfolder import REPO_ROOT

    files = [p for d in ("lab", "pages", "ui") for p in (REPO_ROOT / d).rglob("*.py")]
    found = [
        f"{p.relative_to(REPO_ROOT)}:{line}"
        for p in files + [REPO_ROOT / "app.py"]
        if str(p.relative_to(REPO_ROOT)) not in OWN
        for line in record_reads(p.read_text(encoding="utf-8"))
    ]
    assert not found, f"read run.json/status.json/summary.json with lab.runrecords: {found}"


def test_the_check_finds_a_planted_read():
    planted = (
        "st = read_json(run_dir / STATUS_JSON) or {}\n"
        "run = runfolder.read_json_kept(os.path.join(d, 'run.json'))\n"
        "q = read_json(queue_dir / QUEUE_JSON)\n"
    )
    assert sorted(record_reads(planted)) == [1, 2]
