"""AppTest of the Logs page at TensorBoard's level, on generated folders of real event files:
300 runs (10 experiments x 30) for the run regex, "Select all matching", experiment
toggles, a run's colour across charts, log scale, outlier scaling and the tag sections;
a small folder written by torch's and tensorboardX's ``add_hparams`` plus lab run
folders for the hyperparameters table, whose chosen rows change the charts. The page is
reached from app.py as a user reaches it; the folder is typed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from lab.runfolder import SAMPLE_RUNS
from lab.views.logs.scalar_chart import FIRST_SCREEN_CHARTS, starts_open
from tests.logs_fixtures import make_experiments, run_names, write_events

REPO = Path(__file__).resolve().parent.parent
NAMES = run_names(10)
EXP3 = [n for n in NAMES if n.startswith("exp3/")]


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("logs300")
    make_experiments(root, experiments=10, points=40)
    return root


def _open(folder: Path) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("pages/4_Logs.py")
    at.run()
    at.radio(key="logs_source").set_value("a folder I type").run()
    at.text_input(key="logs_path").set_value(str(folder)).run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at


def _figures(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def _runs_drawn(fig: dict) -> set[str]:
    return {t["name"] for t in fig["data"]}


def _count_line(at: AppTest) -> str:
    return next(c.value for c in at.caption if " selected, " in c.value)


def test_run_regex_and_select_all_matching(runs_dir, big):
    at = _open(big)
    assert _count_line(at) == "300 runs · 6 selected, 6 drawn"
    at.text_input(key="logs_run_re").set_value("^exp3/").run()
    assert _count_line(at) == "30 of 300 runs match the filter · 6 selected, 0 drawn"
    assert not at.get("plotly_chart") and any("Select all matching" in i.value for i in at.info)
    at.button(key="logs_select_matching").click().run()
    assert not at.exception
    assert at.multiselect(key="logs_runs").value == EXP3
    assert _count_line(at) == "30 of 300 runs match the filter · 30 selected, 30 drawn"
    figs = _figures(at)
    assert len(figs) == 2 and all(_runs_drawn(f) == set(EXP3) for f in figs)
    # A narrower regex draws the selected runs it matches, and only those.
    at.text_input(key="logs_run_re").set_value(r"lr0\.1-").run()
    lr = [n for n in EXP3 if "lr0.1-" in n]
    assert len(lr) == 10 and all(_runs_drawn(f) == set(lr) for f in _figures(at))
    at.text_input(key="logs_run_re").set_value("exp(").run()
    assert any("not a valid regular expression" in e.value for e in at.error) and not at.exception


def test_select_all_matching_right_after_typing_uses_the_new_filter(runs_dir, big):
    at = _open(big)
    # The typing and the click reach the server in one rerun (a quick user, a slow page):
    # the button must select what the filter matches now, not what it matched when drawn.
    at.text_input(key="logs_run_re").set_value("^exp7/")
    at.button(key="logs_select_matching").click()
    at.run()
    assert at.multiselect(key="logs_runs").value == [n for n in NAMES if n.startswith("exp7/")]


def test_experiment_toggle_selects_its_runs(runs_dir, big):
    at = _open(big)
    labels = {c.key: c.label for c in at.checkbox if c.key and c.key.startswith("logs_group_")}
    assert len(labels) == 10 and labels["logs_group_exp5"] == "exp5 · 0/30"
    at.checkbox(key="logs_group_exp5").check().run()
    assert not at.exception
    sel = at.multiselect(key="logs_runs").value
    assert len(sel) == 36 and {n for n in NAMES if n.startswith("exp5/")} <= set(sel)
    assert (
        at.checkbox(key="logs_group_exp5").label == "exp5 · 30/30"
        and at.checkbox(key="logs_group_exp5").value
    )
    at.checkbox(key="logs_group_exp5").uncheck().run()
    assert at.multiselect(key="logs_runs").value == NAMES[:6]


def test_colour_of_a_run_is_the_same_on_every_chart(runs_dir, big):
    at = _open(big)
    figs = _figures(at)
    assert len(figs) == 2
    colours = [{t["name"]: t["line"]["color"] for t in f["data"]} for f in figs]
    assert set(colours[0]) == set(NAMES[:6]) and colours[0] == colours[1]
    assert len(set(colours[0].values())) > 1
    # the one colour key of all charts
    legend = next(m.value for m in at.markdown if "&#9632;" in m.value)
    for name, colour in colours[0].items():
        assert f'color:{colour}">&#9632;</span> {name}' in legend


def test_log_scale_outliers_and_tag_sections(runs_dir, big):
    at = _open(big)
    assert [
        e.label
        for e in at.expander
        if " · " in e.label and e.label.split(" · ")[0] in ("train", "val")
    ] == ["train · 1", "val · 1"]
    section = next(e for e in at.expander if e.label == "train · 1")
    assert len(section.get("plotly_chart")) == 1  # each chart sits in its tag's section
    before = _figures(at)[0]["layout"]["yaxis"]
    assert before["type"] == "linear" and "range" not in before
    at.radio(key="logs_yscale").set_value("log").run()
    assert _figures(at)[0]["layout"]["yaxis"]["type"] == "log"
    at.checkbox(key="logs_outliers").check().run()
    y = _figures(at)[0]["layout"]["yaxis"]
    assert y["type"] == "log" and len(y["range"]) == 2 and y["range"][0] < y["range"][1]
    assert {b.label for b in at.get("download_button")} >= {"CSV", "JSON"}


def test_selection_survives_a_refresh_and_new_runs(runs_dir, tmp_path):
    make_experiments(tmp_path, experiments=2, points=10)
    at = _open(tmp_path)
    at.text_input(key="logs_run_re").set_value("^exp1/").run()
    at.button(key="logs_select_matching").click().run()
    chosen = at.multiselect(key="logs_runs").value
    assert len(chosen) == 30
    steps = np.arange(5)
    write_events(
        tmp_path / "exp1" / "late-run" / "events.out.tfevents.9.x",
        {"train/loss": (steps, steps * 1.0)},
    )
    at.run()
    assert not at.exception
    # new runs are not added
    assert "late-run" not in " ".join(at.multiselect(key="logs_runs").value)
    assert at.multiselect(key="logs_runs").value == chosen
    assert _count_line(at) == "31 of 61 runs match the filter · 30 selected, 30 drawn"


@pytest.fixture
def hp_folder(tmp_path) -> Path:
    from tensorboardX import SummaryWriter as XWriter
    from torch.utils.tensorboard import SummaryWriter

    for run, lr, loss in (("torch/a", 0.1, [2.0, 0.5]), ("torch/b", 0.01, [2.0, 1.5])):
        with SummaryWriter(str(tmp_path / run)) as w:
            for i, v in enumerate(loss):
                w.add_scalar("train/loss", v, i)
            w.add_hparams({"lr": lr, "optimizer": "adam"}, {"hparam/final_loss": loss[-1]})
    with XWriter(str(tmp_path / "tbx" / "c")) as w:
        w.add_scalar("train/loss", 3.0, 0)
        w.add_hparams({"lr": 0.001, "optimizer": "sgd"}, {"hparam/final_loss": 3.0}, name="hp")
    for sample in sorted(p for p in SAMPLE_RUNS.iterdir() if (p / "run.json").is_file()):
        shutil.copytree(
            sample, tmp_path / "lab" / sample.name, ignore=shutil.ignore_patterns("logs", "*.log")
        )
    return tmp_path


def test_hparams_table_shows_written_values_and_drives_the_charts(runs_dir, hp_folder):
    at = _open(hp_folder)
    [table] = at.dataframe
    df = table.value.set_index("run")
    assert df.loc["torch/a", "lr"] == pytest.approx(0.1) and df.loc[
        "torch/b", "lr"
    ] == pytest.approx(0.01)
    assert df.loc["tbx/c", "lr"] == pytest.approx(0.001) and df.loc["tbx/c", "optimizer"] == "sgd"
    assert df.loc["torch/a", "hparam/final_loss"] == pytest.approx(0.5)
    lab = [r for r in df.index if r.startswith("lab/")]
    n_samples = sum(1 for p in SAMPLE_RUNS.iterdir() if (p / "run.json").is_file())
    # the runs' run.json configs
    assert len(lab) == n_samples and set(df.loc[lab, "mode"]) == {"single", "dp", "ddp", "fsdp"}
    assert df.loc[lab[0], "lr"] == pytest.approx(0.05)
    row = list(table.value["run"]).index("torch/a")
    at.session_state["logs_hp_table"] = {"selection": {"rows": [row], "columns": [], "cells": []}}
    at.run()
    assert not at.exception
    assert at.multiselect(key="logs_runs").value == ["torch/a"]
    assert all(_runs_drawn(f) == {"torch/a"} for f in _figures(at))
    rows = list(at.dataframe[0].value["run"])
    at.session_state["logs_hp_table"] = {
        "selection": {
            "rows": [rows.index("torch/a"), rows.index("tbx/c")],
            "columns": [],
            "cells": [],
        }
    }
    at.run()
    assert at.multiselect(key="logs_runs").value == ["tbx/c", "torch/a"]
    assert _runs_drawn(_figures(at)[0]) == {"tbx/c", "torch/a"}


def test_hparams_table_filter(runs_dir, hp_folder):
    at = _open(hp_folder)
    at.text_input(key="logs_hp_filter").set_value("lr<0.05, optimizer=adam").run()
    assert list(at.dataframe[0].value["run"]) == ["torch/b"]
    at.text_input(key="logs_hp_filter").set_value("nope=1").run()
    assert any("No column 'nope'" in e.value for e in at.error) and not at.exception


def test_sample_runs_show_their_config(runs_dir):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("pages/4_Logs.py")
    at.run()
    assert not at.exception and not at.error
    df = at.dataframe[0].value
    n_samples = sum(1 for p in SAMPLE_RUNS.iterdir() if (p / "run.json").is_file())
    assert len(df) == n_samples and set(df["mode"]) == {"single", "dp", "ddp", "fsdp"}


def test_sections_past_the_first_screen_start_closed_and_draw_when_opened(runs_dir):
    at = _open(SAMPLE_RUNS)
    sections = [e.label for e in at.expander if " · " in e.label and e.label[0] != "1"]
    counts = {label.split(" · ")[0]: int(label.split(" · ")[1]) for label in sections}
    drawn = len(at.get("plotly_chart"))
    assert sum(counts.values()) > FIRST_SCREEN_CHARTS >= drawn > 0, (counts, drawn)
    closed = [name for name in counts if not at.session_state[f"logs_section_{name}"]]
    assert closed, counts  # the expander's state says which sections were not built
    at.session_state[f"logs_section_{closed[-1]}"] = True
    at.run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == drawn + counts[closed[-1]]


def test_sections_start_open_within_the_first_screens_budget():
    def groups(*sizes):
        return [(str(i), [None] * n) for i, n in enumerate(sizes)]

    assert starts_open(groups(3, 4, 2), budget=8) == [True, True, False]
    assert starts_open(groups(12, 1), budget=8) == [True, False]  # the first always opens
    assert starts_open(groups(2, 9, 1), budget=8) == [True, False, False]  # in order, no gaps
