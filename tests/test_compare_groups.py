"""Groups, not runs (issue 30): a comparison with repeats is between groups, the baseline is a group
and makes no card, the interval sees both groups' spread with its coverage stated, and one verdict
reaches the card, the table, the JSON, the text and the HTML report alike.

Built from hand-made finished run folders (run.json, status.json, summary.json as the trainer and
supervisor write them) and the shipped device-count sample sweep; no process is started.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lab.cli import main as lab_main
from lab.engine import registry
from lab.engine.spec import sweep as sweep_record
from lab.runfolder import REPO_ROOT, SAMPLE_RUNS
from lab.views.compare import document, margins, report, sanity
from lab.views.compare import runs as compare_runs
from lab.views.compare import table as cols
from lab.views.compare import verdict as v
from lab.views.compare.comparison import compare

FOUR = ("cpu0", "cpu1", "cpu2", "cpu3")
AT = "2026-12-03T07:{:02d}:00+00:00"


def _run(
    root: Path,
    run_id: str,
    throughput: float,
    *,
    mode: str = "single",
    devices: tuple[str, ...] = ("cpu0",),
    effective_mode: str | None = None,
    sweep_id: str | None = None,
    varied: dict | None = None,
    minute: int = 0,
    windows: int = 40,
    train_processes: int | None = None,
    expectations: list[dict] | None = None,
    scaling: str | None = "strong",
) -> Path:
    """A finished trainer run: its steady throughput ``throughput`` (median of ``windows``
    windows, a ±2% interval), what the supervisor and the pre-flight recorded."""
    d = root / run_id
    d.mkdir(parents=True)
    nproc = len(devices) if mode == "ddp" else 1
    config = {"mode": mode, "model": "tinycnn", "dataset": "digits", "batch_size": 64, "seed": 0}
    config.update({"nproc": nproc, "nnodes": 1} if mode == "ddp" else {})
    created = AT.format(minute)
    meta = {"run_id": run_id, "name": run_id, "config": config, "created_at": created}
    meta.update({"host": "box", "sweep_id": sweep_id, "scaling": scaling, "varied": varied})
    (d / "run.json").write_text(json.dumps(meta))
    status: dict = {"state": "succeeded"}
    if train_processes is not None:
        status["train_processes"] = train_processes
    (d / "status.json").write_text(json.dumps(status))
    if expectations is not None:
        lines = [e["text"] for e in expectations]
        (d / "preflight.json").write_text(
            json.dumps({"lines": lines, "expectations": expectations})
        )
    ws = nproc
    summary = {
        "config": config,
        "mode": mode,
        "effective_mode": effective_mode or mode,
        "world_size": ws,
        "devices": list(devices),
        "global_batch": 64,
        "per_device_batch": 64 // ws,
        "steps": 200,
        "steady_throughput_samples_per_sec": throughput,
        "throughput": {
            "median": throughput,
            "ci_low": throughput * 0.98,
            "ci_high": throughput * 1.02,
            "windows": windows,
        },
        "peak_mem_mib": {dv: 100.0 for dv in devices},
        "final": {"train_loss": 0.3},
        "hostname": "box",
        "completed": True,
    }
    (d / "summary.json").write_text(json.dumps(summary))
    return d


def _load(root: Path, sample: bool = False) -> list[compare_runs.CompareRun]:
    records = compare_runs.comparable(registry.list_runs(root))
    return [compare_runs.from_record(r, sample=sample) for r in records]


def _sweep(root: Path, sweep: str, groups: list[tuple[dict, list[float]]], **kw) -> None:
    """A knob sweep made in order: each (varied values, repeats' throughputs) after the last."""
    minute = 0
    for varied, speeds in groups:
        tag = "-".join(
            f"{k}{val:g}" if isinstance(val, float) else f"{k}{val}" for k, val in varied.items()
        )
        for i, tp in enumerate(speeds):
            _run(
                root, f"{sweep}-{tag}-r{i}", tp, sweep_id=sweep, varied=varied, minute=minute, **kw
            )
            minute += 1


def test_shipped_device_count_sweep_ddp2_sees_both_sides():
    runs = [r for r in _load(SAMPLE_RUNS, sample=True) if r.name.startswith("scaling-")]
    c = compare(runs)
    cards = {(card.mode, card.devices): card for card in c.headline}
    assert set(cards) == {("ddp", 1), ("ddp", 2)}  # the single group is the baseline: no card
    ddp2 = cards[("ddp", 2)]
    base = c.baseline_group.values
    ddp = next(g for g in c.groups if (g.mode, g.devices) == ("ddp", 2))
    assert c.baseline_group.mode == "single" and len(base) == 3
    # the interval over the 9 pairs of runs: both sides' spread, about 0.85–1.30
    assert ddp2.ci_low == pytest.approx(0.85, abs=0.01) and ddp2.ci_high == pytest.approx(
        1.30, abs=0.01
    )
    assert ddp2.ci_low == pytest.approx(min(ddp.values) / max(base))
    assert ddp2.speedup == pytest.approx(1.08, abs=0.01)
    assert ddp2.coverage_text == "range of 3×3 pairs, 90%" and ddp2.coverage == 0.9
    assert ddp2.verdict == v.WITHIN
    assert "1.08× (0.85–1.30, range of 3×3 pairs, 90%) within noise" in "\n".join(document.text(c))
    # the scaling curve answers the same question with the same number
    point = next(p for p in c.scaling_curve if (p["mode"], p["devices"]) == ("ddp", 2))
    assert point["speedup"]["value"] == pytest.approx(ddp2.speedup)
    assert (point["speedup"]["ci_low"], point["speedup"]["ci_high"]) == (ddp2.ci_low, ddp2.ci_high)
    assert point["speedup"]["verdict"] == ddp2.verdict


def test_seed_sweep_with_repeats_has_one_card_against_the_first_seed(tmp_path):
    """--vary seed=1,2 --repeats 3: identical work; the seed=1 group is the baseline."""
    _sweep(
        tmp_path, "sweep-seed", [({"seed": 1}, [1000, 1080, 950]), ({"seed": 2}, [1170, 990, 1010])]
    )
    c = compare(_load(tmp_path))
    assert [card.mode for card in c.headline] == ["single seed=2"]
    card = c.headline[0]
    assert card.baseline == "single seed=1 on 1 device" and card.runs == 3
    assert card.verdict == v.WITHIN  # 1.17 alone would have read "faster" against one run
    assert c.baseline_group.mode == "single seed=1" and c.baseline_group.runs == 3
    rows = {r.run.run_id: r for r in c.rows}
    assert {r.verdict for r in rows.values() if r.run.varied == {"seed": 1}} == {v.BASELINE}


def test_delay_sweep_has_one_card_for_4ms_against_0ms_reading_slower(tmp_path):
    # the 4 ms runs are made first within the same sweep order check: the first value is 0 ms
    _sweep(
        tmp_path,
        "sweep-delay",
        [({"data-delay-ms": 0.0}, [1000, 1020, 985]), ({"data-delay-ms": 4.0}, [760, 740, 755])],
    )
    c = compare(_load(tmp_path))
    assert [card.mode for card in c.headline] == ["single data-delay-ms=4"]
    card = c.headline[0]
    assert card.baseline == "single data-delay-ms=0 on 1 device"
    assert card.verdict == v.SLOWER and card.speedup == pytest.approx(755 / 1000)
    assert card.ci_high == pytest.approx(760 / 985)


def test_modes_sweep_on_cpu_has_no_dp_card_and_no_single_against_single(tmp_path):
    for i, (mode, devices, eff, tp) in enumerate(
        [
            ("single", ("cpu0",), None, 1000),
            ("dp", ("cpu0",), "single", 1300),
            ("ddp", ("cpu0", "cpu1"), None, 820),
        ]
        * 3  # fmt: skip
    ):
        _run(tmp_path, f"m{i}-{mode}", tp + i, mode=mode, devices=devices, effective_mode=eff,
             sweep_id="sweep-modes", minute=i)  # fmt: skip
    c = compare(_load(tmp_path))
    assert [(card.mode, card.devices) for card in c.headline] == [("ddp", 2)]
    assert c.headline[0].runs == 3 and c.headline[0].coverage_text == "range of 3×3 pairs, 90%"
    # the rows, the repeats table and the card give one number and one verdict per question
    ddp_rows = [r for r in c.rows if r.figures.mode == "ddp"]
    assert {r.verdict for r in ddp_rows} == {c.headline[0].verdict}
    rep = {g["mode"]: g for g in c.by_mode}
    assert rep["ddp"]["speedup"] == pytest.approx(c.headline[0].speedup)
    assert rep["ddp"]["verdict"] == c.headline[0].verdict
    assert rep["single"]["verdict"] == v.BASELINE


def _mixed(root: Path) -> None:
    """A sweep with a faster group, a slower one and one within noise."""
    for i in range(3):
        _run(root, f"x{i}-single", [1000, 1030, 980][i], sweep_id="sweep-mix", minute=i)
        _run(root, f"x{i}-ddp", [1500, 1540, 1480][i], mode="ddp", devices=("cpu0", "cpu1"),
             sweep_id="sweep-mix", minute=10 + i)  # fmt: skip
        _run(root, f"x{i}-ddp4", [700, 720, 690][i], mode="ddp", devices=FOUR,
             sweep_id="sweep-mix", minute=20 + i)  # fmt: skip
        _run(root, f"x{i}-dp", [1000, 1060, 950][i], mode="dp", devices=("cuda0", "cuda1"),
             sweep_id="sweep-mix", minute=30 + i)  # fmt: skip


def test_all_five_renderings_give_the_same_verdict(runs_dir, capsys):
    """The card (on the page too), the table's rows, the JSON ``headline``, the CLI's text and the
    HTML report."""
    tmp_path = runs_dir
    _mixed(tmp_path)
    c = compare(_load(tmp_path))
    want = {(card.mode, card.devices): card.verdict for card in c.headline}
    assert sorted(want.values()) == sorted([v.FASTER, v.SLOWER, v.WITHIN])
    # 1. the cards are the groups' verdicts, from compare_groups on the runs' throughputs
    base = [r.figures.throughput for r in c.rows if r.figures.mode == "single"]
    for card in c.headline:
        key = (card.mode, card.devices)
        mine = [r.figures.throughput for r in c.rows
                if (r.figures.mode, r.figures.device_count) == key]  # fmt: skip
        assert card.verdict == v.compare_groups(base, mine).verdict
    # 2. the table: each row carries its group's verdict
    df = cols.frame(c)
    for row, verdict in zip(c.rows, df[cols.VERDICT]):
        key = (row.figures.mode, row.figures.device_count)
        assert verdict == want.get(key, v.BASELINE)
    # 3. the JSON headline, from the CLI as a user runs it (LAB_RUNS_DIR is runs_dir)
    assert lab_main(["compare", "sweep-mix", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {(h["mode"], h["devices"]): h["verdict"] for h in doc["headline"]} == want
    assert all(h["speedup"]["coverage_text"] == "range of 3×3 pairs, 90%" for h in doc["headline"])
    assert doc["margin"] == {"pct": 10.0, "source": "documented default, 10%"}
    # 4. the CLI's text
    assert lab_main(["compare", "sweep-mix"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("headline: ")]
    assert len(lines) == len(want)
    for card in c.headline:
        line = next(x for x in lines if x.startswith(f"headline: {card.mode} on {card.devices}: "))
        assert f" {card.verdict}" in line
        assert not any(f" {other}," in line or line.endswith(f" {other}")
                       for other in {v.FASTER, v.SLOWER, v.WITHIN} - {card.verdict})  # fmt: skip
    # 5. the HTML report's cards
    html = report.build_html(c)
    for card in c.headline:
        assert f"speedup {card.speedup_text()} {card.verdict}<br>" in html
    assert "95%" not in html.split("<h2>Runs</h2>")[0]


def test_superlinear_efficiency_is_flagged_never_green(tmp_path):
    for i in range(3):
        _run(tmp_path, f"s{i}", 1000 + 10 * i, sweep_id="sweep-sl", minute=i)
        _run(tmp_path, f"d{i}", 3400 + 10 * i, mode="ddp", devices=("cpu0", "cpu1"),
             sweep_id="sweep-sl", minute=10 + i)  # fmt: skip
    c = compare(_load(tmp_path))
    card = c.headline[0]
    assert card.efficiency == pytest.approx(1.7, abs=0.02)
    assert card.verdict == v.SUSPECT and "different work per step" in card.reason
    assert "slowed baseline" in card.reason and "oversubscribed threads" in card.reason
    assert sanity.SUPERLINEAR in {w.key for w in c.warnings}
    df = cols.frame(c)
    assert cols.GREEN not in cols.emphasis(df)


def test_a_single_run_in_several_processes_is_noted_with_the_fix(tmp_path):
    # a user's script that starts its own 2 DDP processes, launched as single, then as ddp
    _run(tmp_path, "lightning-single", 900, train_processes=2, minute=0, scaling=None)
    _run(tmp_path, "plain-single", 1000, minute=1, scaling=None)
    _run(tmp_path, "ddp2", 1500, mode="ddp", devices=("cpu0", "cpu1"), minute=2)
    c = compare(_load(tmp_path))
    warns = [w for w in c.warnings if w.key == sanity.MULTIPROCESS_SINGLE]
    assert len(warns) == 1 and warns[0].message.startswith("lightning-single: placed as single")
    assert "launch it as ddp so the lab places the processes and their threads" in warns[0].message
    assert c.baseline_key != "lightning-single"  # not the baseline while a plain single run exists


def test_an_unprofiled_card_gives_the_preflight_expectation_as_its_reason(tmp_path):
    why = "2 processes share 2 cores, expect little or no speedup"
    _run(tmp_path, "a-single", 1000, minute=0)
    _run(tmp_path, "b-ddp", 1010, mode="ddp", devices=("cpu0", "cpu1"), minute=1,
         expectations=[{"key": "cores_shared", "text": why}])  # fmt: skip
    c = compare(_load(tmp_path))
    assert [card.reason for card in c.headline] == [why]


def test_one_run_against_one_run_says_it_has_no_run_to_run_evidence(tmp_path):
    _run(tmp_path, "a-single", 1000, minute=0)
    _run(tmp_path, "b-ddp", 1500, mode="ddp", devices=("cpu0", "cpu1"), minute=1)
    card = compare(_load(tmp_path)).headline[0]
    # 1.5x, yet no claim: identical pairs here measured 1.33x and 0.71x (verdict.one_run_each)
    assert card.coverage_text == v.ONE_EACH and card.verdict == v.WITHIN
    few = tmp_path / "few"
    _run(few, "a-single", 1000, minute=0, windows=2)
    _run(few, "b-ddp", 1500, mode="ddp", devices=("cpu0", "cpu1"), minute=1, windows=2)
    card = compare(_load(few)).headline[0]
    assert card.coverage_text.startswith(f"{v.ONE_EACH}; too few steady windows (2 and 2)")
    assert "covers about 25%" in card.coverage_text  # 50% each, if the windows were independent


def test_the_margin_is_an_input_and_is_named(tmp_path):
    _mixed(tmp_path)
    runs = _load(tmp_path)
    measured = v.Margin(60.0, "measured on box, 2 devices, noise n1 (5 runs)")
    c = compare(runs, margin=measured)
    assert {card.verdict for card in c.headline} <= {v.WITHIN, v.SLOWER}
    assert all(card.margin_source == measured.source for card in c.headline)
    assert "Noise margin 60% (measured on box" in " ".join(c.notes)
    assert document.to_json(c)["margin"] == {"pct": 60.0, "source": measured.source}


def test_the_page_cards_carry_the_same_verdicts(runs_dir):
    """The page's cards (st.metric: value, interval with its coverage, verdict) are the
    comparison's cards of the runs the page chose."""
    _mixed(runs_dir)
    at = AppTest.from_file(str(REPO_ROOT / "pages" / "3_Compare.py"), default_timeout=60).run()
    assert not at.exception
    chosen = set(at.multiselect(key="cmp_runs").value)
    c = compare([r for r in _load(runs_dir) if r.key in chosen])
    assert c.headline
    shown = [(m.label, m.value, m.delta, m.proto.delta_description) for m in at.metric]
    want = [
        (f"{card.mode} on {card.devices} devices", card.value_text(), card.delta_text(),
         card.verdict)
        for card in c.headline
    ]  # fmt: skip
    assert sorted(shown) == sorted(want)
    assert all(m.delta.endswith(", 50%") for m in at.metric)  # 1 run against 3 (the page's 10)
    assert sum("range of 1×3 pairs, 50%" in x.value for x in at.caption) == len(at.metric)


def test_the_margin_can_be_looked_up_per_host_and_device_count(tmp_path):
    """The engine's latest measured noise for the baseline's host and each group's device count;
    the documented 10% where none was measured."""
    _mixed(tmp_path)
    asked = []

    def latest(host, devices):
        asked.append((host, devices))
        return v.Margin(60.0, f"measured on {host}, {devices} devices") if devices == 2 else None

    c = compare(_load(tmp_path), margin=latest)
    cards = {(card.mode, card.devices): card for card in c.headline}
    assert cards[("ddp", 2)].margin_source == "measured on box, 2 devices"
    assert cards[("ddp", 2)].verdict == v.WITHIN  # 1.44–1.57 lies inside the 60% margin
    assert cards[("ddp", 4)].margin_source == v.DEFAULT_SOURCE
    assert cards[("ddp", 4)].verdict == v.SLOWER
    assert set(asked) == {("box", 1), ("box", 2), ("box", 4)}  # each count looked up once
    assert len(asked) == 3
    point = next(p for p in c.scaling_curve if (p["mode"], p["devices"]) == ("ddp", 2))
    assert point["speedup"]["verdict"] == v.WITHIN  # the curve uses the same margin


def test_without_a_noise_record_the_documented_margin_is_used_and_named(tmp_path):
    _mixed(tmp_path)
    c = compare(_load(tmp_path), margin=margins.measured(tmp_path))
    assert {card.margin_source for card in c.headline} == {v.DEFAULT_SOURCE}
    assert {card.margin_pct for card in c.headline} == {10.0}
    assert "noise margin 10% (documented default, 10%)" in c.baseline_text


def test_the_first_value_is_the_sweeps_own_first_in_any_order_given(tmp_path):
    """A sweep makes its runs within one second: the first value is its record's first (the plan's
    order), whatever order a page or a command line passes the runs in."""
    ids = []
    for i, (seed, tp) in enumerate(
        [(1, 1000), (2, 1010), (1, 990), (2, 1005), (1, 1020), (2, 995)]
    ):
        ids.append(f"s-seed{seed}-{i}")
        _run(tmp_path, ids[-1], tp, sweep_id="sweep-same", varied={"seed": seed}, minute=0)
    sweep_record.write(tmp_path, "sweep-same", ids, "strong")
    runs = _load(tmp_path)
    assert sorted(r.sweep_index for r in runs) == list(range(6))
    for given in (runs, runs[::-1]):
        c = compare(given)
        assert [card.mode for card in c.headline] == ["single seed=2"]
        assert c.headline[0].baseline == "single seed=1 on 1 device"
        assert [g["value"] for g in c.by_value["seed"]] == [1, 2]
