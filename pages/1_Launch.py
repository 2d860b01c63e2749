"""Launch: the lab's trainer or "My script" (a user's own script, unchanged),
a form for every field of the run, the pre-flight check in plain words, the
exact command and environment that will run (copyable, and one per other
node), then the launch itself; or, with "Where to run: slurm", the Slurm
job's options and the job script that will be submitted. A refused config
shows its message next to the field and starts nothing; a server that
listens beyond this machine launches nothing unless
LAB_ALLOW_REMOTE_LAUNCH=1 (``lab.engine.launch.access``). Layout only: the form's
fields are ``lab.engine.launch.form.FIELDS`` (a script's
``lab.engine.launch.script_form.SCRIPT_FIELDS``), reading them is
``request.run_config`` (``script_form.script_config``), what is shown before a
launch is ``request.preview`` (``script_form.preview``), the checks are
``lab.engine.launch.config`` (``lab.engine.launch.script``) and the launch is
``lab.engine.launch.launcher`` (either kind of run). "Compare modes of this
config" runs the form's config in every chosen mode and device count as one
sweep (``lab.engine.sweep.plan``) and links to Compare, which opens on it.
"""

from __future__ import annotations

import os
from typing import Any

import streamlit as st

from lab import runfolder as paths
from lab.engine.launch import form, request, script, script_form
from lab.engine.launch.access import launch_access
from lab.engine.launch.config import problems
from lab.engine.preflight.checks import machine_facts
from lab.engine.spec import modes
from lab.engine.spec.modes import MODES, SWEEP_DEFAULT
from lab.engine.spec.run import ConfigError
from lab.engine.sweep import plan, vary
from lab.views import text as ui_text
from lab.views.compare import scaling as scaling_view
from ui import warm
from ui.gate import require_password

st.set_page_config(page_title="Launch · Parallel Training Lab", page_icon="🚀", layout="wide")
require_password()
st.title("Launch a run")

KINDS = {paths.TRAINER: "The lab's trainer", paths.SCRIPT: "My script"}

access = launch_access(st.get_option("server.address"))
if access.message:
    st.warning(access.message)
kind = st.radio(
    "What to run", list(KINDS), format_func=KINDS.get, horizontal=True, key="launch_kind"
)


@st.cache_data(ttl=5, show_spinner=False)
def _snapshot():
    from lab.engine.devices.nvml import snapshot
    from lab.engine.registry import gpu_users, process_owner

    return snapshot(process_owner(paths.runs_dir()), gpu_users(paths.runs_dir()))


snap = _snapshot()
usable = tuple(g.index for g in snap.gpus)  # NVML's indices that could be read: maybe not 0..n-1
if kind == paths.SCRIPT:
    fields, layout = script_form.SCRIPT_BY_NAME, script_form.LAYOUT
    start = script_form.form_values(script_form.script_config({}, usable)[0])
else:
    fields, layout = form.BY_NAME, form.LAYOUT
    # the engine's defaults, for the dashboard's quick run: tinycnn on digits, about a minute on a
    # laptop CPU
    start = request.form_values(request.run_config({"epochs": ui_text.QUICK_EPOCHS}, usable)[0])
values: dict[str, Any] = {}  # field -> what its widget gives (None: disabled)
slots: dict[str, Any] = {}  # field -> placeholder under its widget, for its message


def gpu_boxes(f: form.FormField) -> tuple[int, ...]:
    if not snap.gpus:
        st.info(
            f"No GPU here — {snap.reason or 'none found: runs use the CPU with the gloo backend'}."
        )
        return ()
    st.write(f.label)
    cols = st.columns(min(4, len(usable)))
    chosen = tuple(
        g.index
        for i, g in enumerate(snap.gpus)
        if cols[i % len(cols)].checkbox(
            f"GPU {g.index} · {g.name}", value=g.index in start["gpus"], key=f"{f.key}_{g.index}"
        )
    )
    for note in snap.notes:  # GPUs NVML counts but would not open: not offered
        st.caption(note)
    return chosen


def widget(f: form.FormField) -> Any:
    """Draw one field where we are; return its value (None when disabled)."""
    on = f.enabled(values)
    kw: dict[str, Any] = dict(key=f.key, help=f.help or None)
    if f.kind == "gpus":
        if not on:  # a Slurm job: its GPUs are the nodes', asked for as GPUs per node
            st.caption("GPUs: the Slurm job's, set as GPUs per node above.")
            return None
        return gpu_boxes(f)
    per_node = values.get("gpus") or range(values.get("gpus_per_node") or 0)
    if f.name == "nproc" and modes.torchrun(values["mode"]) and per_node:
        st.caption(f"{values['mode'].upper()}: {len(per_node)} process(es) per node, one per GPU.")
        return None  # one process per GPU: nothing to choose
    if f.kind in ("radio", "select"):
        draw = st.radio if f.kind == "radio" else st.selectbox
        if f.kind == "radio":
            kw["horizontal"] = f.name == "backend"
        options = f.choices()
        return draw(
            f.label,
            options,
            index=options.index(start[f.name]),
            format_func=f.shown,
            disabled=not on,
            **kw,
        )
    if f.kind in ("int", "float"):
        step = int(f.step) if f.kind == "int" else float(f.step)
        value = st.number_input(
            f.label, value=start[f.name], step=step, format=f.fmt, disabled=not on, **kw
        )
    elif f.kind == "check":
        value = st.checkbox(f.label, value=start[f.name], disabled=not on, **kw)
    elif f.kind == "lines":
        value = st.text_area(f.label, value=start[f.name], height=80, disabled=not on, **kw)
    else:
        value = st.text_input(f.label, value=start[f.name], disabled=not on, **kw)
    return value if on else None


def draw_rows(rows: list[list[str | tuple[str, ...]]]) -> None:
    for row in rows:
        cols = st.columns(len(row)) if len(row) > 1 else [st.container()]
        for col, names in zip(cols, row):
            names = (names,) if isinstance(names, str) else names
            with col:
                for name in names:
                    values[name] = widget(fields[name])
                for name in names:
                    slots[name] = st.empty()


left, right = st.columns([3, 2])
with left:
    st.subheader("What to run")
    for title, rows in layout:
        if title is None:
            draw_rows(rows)
        else:
            with st.expander(title):
                draw_rows(rows)

if kind == paths.SCRIPT:
    cfg, found = script_form.script_config(values, usable)
    found = found + script.problems(cfg, usable)
else:
    cfg, found = request.run_config(values, usable)
    found = found + problems(cfg, usable)
    if not found:  # then what the pre-flight refuses on this machine, as launch does
        found = problems(cfg, usable, machine_facts(cfg, snap.gpus))
by_field: dict[str, list[str]] = {}
for err in found:
    by_field.setdefault(err.field if err.field in slots else "", []).append(err.message)
for fld, msgs in by_field.items():
    (slots[fld] if fld else st).error("  \n".join(msgs))

with right:
    st.subheader("Before launching")
    if found:
        # Listed here too: a field inside a closed expander hides its message.
        st.warning(
            "Fix before launching (also marked next to each field):\n"
            + "\n".join(f"- **{e.field}**: {ui_text.md_escape(e.message)}" for e in found)
        )
    else:
        try:
            shown = (
                script_form.preview(cfg, snap)
                if kind == paths.SCRIPT
                else request.preview(cfg, snap)
            )
        except Exception as e:  # the engine names the fix; never a traceback
            st.error(f"Cannot prepare this run: {e}")
            st.stop()
        st.markdown("**Pre-flight**")
        st.markdown("\n".join(f"- {ui_text.md_escape(line)}" for line in shown.preflight))
        if shown.sbatch:  # a Slurm run: the job script, then the command that submits it
            st.markdown("**The job script** (written to the run folder as `job.sbatch`)")
            st.code(shown.sbatch, language="bash")
            st.markdown("**The command that submits it**")
        else:
            st.markdown(
                f"**The command that will run** (`{request.PORT_PLACEHOLDER}`: a port chosen free "
                "at launch)"
            )
        st.code(ui_text.shell_line(shown.argv, shown.env, cwd=shown.cwd), language="bash")
        for i, other in enumerate(shown.other_nodes, start=1):
            st.markdown(f"**On node {i}** (same repository; the command sets the GPU environment)")
            st.code(ui_text.shell_line(other, cwd=shown.cwd), language="bash")
    st.caption(f"Runs are written to `{paths.runs_dir()}`")

    if st.button("Launch", type="primary", key="launch_go"):
        if not access.allowed:
            st.error(f"Not launched: {access.message}")
        elif found:
            st.error("Not launched: fix the fields marked in red first.")
        else:
            from lab.engine.launch import launcher

            try:
                st.session_state["launch_last"] = launcher.launch(cfg)
            except ConfigError as e:
                (slots.get(e.field) or st).error(e.message)
                st.error(f"Not launched: {e.message}")
            except Exception as e:  # the launcher names the fix; never show a traceback
                st.error(f"Not launched: {e}")
    last = st.session_state.get("launch_last")
    if last:
        st.success(f"Launched **{last}**")
        st.page_link(
            "pages/2_Live.py",
            label="Watch it live",
            icon=":material/monitoring:",
            query_params={"run": last},
        )

    with st.expander("Compare modes of this config"):
        st.caption(
            "Runs this config in each mode and device count, one after another so each has the "
            "machine to itself (repeats take turns), then compares them on the Compare page."
        )
        counts = plan.count_choices(usable, os.cpu_count() or 1)
        sweep_modes = st.multiselect(
            "Modes", MODES, default=list(SWEEP_DEFAULT), key="launch_cmp_modes"
        )
        sweep_counts = st.multiselect(
            "Device counts",
            counts,
            default=counts[-1:],
            key="launch_cmp_counts",
            help="GPUs (the first N usable ones), or DDP processes (gloo) on a machine without "
            "GPUs, where DP runs once, on one device. Single runs once per repeat.",
        )
        sweep_repeats = st.number_input(
            "Repeats",
            min_value=1,
            max_value=plan.MAX_REPEATS,
            value=1,
            key="launch_cmp_repeats",
            help="Each mode and count this many times, interleaved. 3 is the fewest that give a "
            "verdict: with fewer, Compare shows the speedups but calls none faster or slower.",
        )
        sweep_scaling = st.radio(
            "Scaling",
            list(scaling_view.CHOICES),
            format_func=scaling_view.CHOICES.get,
            horizontal=True,
            key="launch_cmp_scaling",
            help=scaling_view.CHOICE_HELP,
            disabled=kind == paths.SCRIPT,  # a script's batch is its own arguments'
        )
        sweep_vary = st.text_area(
            "Vary (optional)",
            key="launch_cmp_vary",
            height=70,
            help="One option per line as NAME=V1,V2,… (the flag without dashes), crossed with the "
            "modes and counts: e.g. bucket-cap-mb=1,25,100 or precision=fp32,bf16; for My "
            "script, a flag of your script: lr=0.1,0.01 gives it --lr 0.1, then --lr 0.01. "
            "Compare then gives each value's speedup against the first, with no fairness warning "
            "about it.",
        )
        if st.button("Compare modes of this config", key="launch_cmp_go"):
            if not access.allowed:
                st.error(f"Not started: {access.message}")
            elif found:
                st.error("Not started: fix the fields marked in red first.")
            else:
                from lab.engine.launch import sweeps

                try:
                    axes = vary.parse((sweep_vary or "").splitlines(), script=kind == paths.SCRIPT)
                    configs = plan.device_count_configs(
                        cfg, usable, sweep_modes, sweep_counts, sweep_scaling, os.cpu_count() or 1
                    )
                    runs, varied = vary.sweep_runs(configs, axes, int(sweep_repeats))
                    sweep = sweeps.launch_sweep(runs, scaling=sweep_scaling, varied=varied)
                    st.session_state["launch_sweep"] = sweep
                except Exception as e:  # the engine names the fix; never show a traceback
                    st.error(f"Not started: {e}")
        started = st.session_state.get("launch_sweep")
        if started:
            st.success(f"Sweep **{started[0]}** started: {len(started[1])} runs")
            st.page_link(
                "pages/3_Compare.py", label="Compare them", icon=":material/compare_arrows:"
            )
# Once this page is drawn, the other pages' imports load in the background (ui.warm).
warm.start()
