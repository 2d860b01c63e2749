"""The "Only what differs" toggle on the Logs page's hyperparameters table: a key missing and a
key at its default are one value, so a column empty, None or at its default in every row does not
show.

On the shipped sample runs (recorded before some trainer options existed, and after) and on
synthetic rows, through ``lab.views.logs.hparams_table.hp_table``.
"""

from __future__ import annotations

import math

from lab.runfolder import SAMPLE_RUNS
from lab.views.logs import hparams_table as hpt


def _sample_rows() -> list[hpt.HpRow]:
    rows = []
    for d in sorted(SAMPLE_RUNS.iterdir()):
        config = hpt.lab_config(d)
        if config is not None:
            rows.append(hpt.HpRow(d.name, (d.name,), config, {}, hpt.FROM_RUN_JSON))
    assert len(rows) >= 2, f"{SAMPLE_RUNS} lost its recorded runs"
    return rows


def _differs(table, column: str) -> bool:
    return len({repr(v) for v in table[column]}) > 1


def test_on_the_sample_runs_only_columns_that_differ_show():
    rows = _sample_rows()
    # the older runs lack keys the newer ones hold at their default (e.g. channels_last=False)
    assert any("channels_last" not in r.hparams for r in rows)
    assert any(r.hparams.get("channels_last") is False for r in rows)
    table = hpt.hp_table(rows, varying_only=True)
    shown = [c for c in table.columns if c != hpt.RUN_COLUMN]
    assert shown, "the sample runs differ in mode, epochs, batch size"
    assert {"mode", "epochs", "batch_size"} <= set(shown)
    for column in shown:
        assert _differs(table, column), f"{column} shows the same value in every row"
    assert "channels_last" not in shown and "precision" not in shown
    # every column left out holds one value in every row (missing = default)
    full = hpt.hp_table(rows)
    for column in set(full.columns) - set(table.columns):
        assert not _differs(full, column), f"{column} differs yet is hidden"


def test_a_missing_key_shows_the_default_in_the_full_table():
    rows = _sample_rows()
    full = hpt.hp_table(rows)
    assert set(full["precision"]) == {"fp32"}
    assert set(full["channels_last"]) == {False}


D = {"amp": False, "accum": 1, "preset": ""}


def _row(run: str, source: str = hpt.FROM_RUN_JSON, **hparams) -> hpt.HpRow:
    return hpt.HpRow(run, (run,), hparams, {}, source)


def test_synthetic_missing_none_empty_and_default_are_one_value():
    rows = [
        _row("a", lr=0.1, amp=False, accum=1, preset="", note=None),
        _row("b", lr=0.2, accum=1.0),  # 1.0 read back from JSON equals the default 1
        _row("c", lr=0.1, amp=False, preset="  ", note=""),
    ]
    table = hpt.hp_table(rows, varying_only=True, defaults=D)
    assert list(table.columns) == ["run", "lr"]


def test_synthetic_a_value_off_its_default_shows_with_the_default_filled_in():
    rows = [_row("a", lr=0.1), _row("b", lr=0.1, amp=True), _row("c", lr=0.1, amp=False)]
    table = hpt.hp_table(rows, varying_only=True, defaults=D)
    assert list(table.columns) == ["run", "amp"]
    assert list(table["amp"]) == [False, True, False]


def test_synthetic_event_file_rows_have_no_defaults():
    # TensorBoard's hparams of anyone's script: a missing key is no value, not a lab default
    rows = [
        _row("a", hpt.FROM_EVENTS, lr=0.1, amp=False),
        _row("b", hpt.FROM_EVENTS, lr=0.1),
        _row("c", hpt.FROM_EVENTS, lr=0.1, opt=None),
    ]
    table = hpt.hp_table(rows, varying_only=True, defaults=D)
    assert list(table.columns) == ["run", "amp"]
    assert [v is False for v in table["amp"]] == [True, False, False]
    assert table["amp"][1] is None or math.isnan(table["amp"][1])


def test_a_column_empty_everywhere_does_not_show_even_for_one_row():
    table = hpt.hp_table([_row("a", lr=0.1, note="")], varying_only=True, defaults={})
    assert list(table.columns) == ["run", "lr"]


def test_the_lab_defaults_are_the_trainers():
    d = hpt.lab_defaults()
    assert d["precision"] == "fp32" and d["channels_last"] is False and d["accum_steps"] == 1
