"""``bench/calibration.py --power``: resampling recorded runs says how often the verdict calls a
known slowdown slower, and two identical groups different. Checked on run folders whose
throughputs are known, where the answer is not in doubt either way."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def bench():
    spec = importlib.util.spec_from_file_location("calibration", REPO / "bench/calibration.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def runs(folder: Path, throughputs: list[float], delay_ms: float) -> None:
    for i, t in enumerate(throughputs):
        run = folder / f"run-{delay_ms:g}-{i}"
        run.mkdir()
        summary = {"completed": True, "config": {"data_delay_ms": delay_ms}}
        (run / "summary.json").write_text(json.dumps(summary | {"throughput": {"median": t}}))


def test_a_clear_slowdown_is_always_slower_and_identical_groups_never_differ(tmp_path, capsys):
    runs(tmp_path, [1000 + i for i in range(20)], 0)  # 1000–1019: 2% spread
    runs(tmp_path, [700 + i for i in range(10)], 6)  # 30% slower, same small spread
    assert bench().power(tmp_path, margin_pct=10.0, draws=200) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("repeats")]
    assert rows[0] == "repeats 3: A/B called slower in 100.0%, A/A called different in 0.0%"
    assert len(rows) == 5


def test_a_slowdown_inside_the_noise_is_rarely_called(tmp_path, capsys):
    runs(tmp_path, [1000 * (1 + 0.5 * (i % 5)) for i in range(20)], 0)  # 1000–3000: wide
    runs(tmp_path, [950 * (1 + 0.5 * (i % 5)) for i in range(10)], 6)  # 5% slower
    assert bench().power(tmp_path, margin_pct=10.0, draws=400) == 0
    row = capsys.readouterr().out.splitlines()[1]
    power = float(row.split("slower in ")[1].split("%")[0])
    assert row.startswith("repeats 3") and power < 10.0


def test_too_few_runs_is_one_line_naming_the_fix(tmp_path, capsys):
    runs(tmp_path, [1000.0] * 3, 0)
    assert bench().power(tmp_path, margin_pct=10.0) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "run the bench first" in err


def test_unfinished_runs_are_left_out(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    summary = {"completed": False, "throughput": {"median": 5.0}, "config": {}}
    (run / "summary.json").write_text(json.dumps(summary))
    assert bench().pooled_throughputs(tmp_path) == ([], [])
