"""Launch: a form for every field of a run, the pre-flight check in plain
words, the exact command and environment that will run (copyable, and one
per other node), then the launch itself. A refused config shows its message
next to the field and starts nothing. Layout only: the checks, the command
and the launch are ``lab.engine.config`` and ``lab.engine.launcher``.
"""
from __future__ import annotations

import os

import streamlit as st

from lab import runfolder as paths
from lab.views import text as ui_text
from lab.engine.config import CHECKPOINTS, MODELS, MODES, ConfigError, RunConfig, problems

st.set_page_config(page_title="Launch · Parallel Training Lab", page_icon="🚀", layout="wide")
st.title("Launch a run")

D = RunConfig()  # the engine's defaults: tinycnn on digits, about a minute on a laptop CPU
MODE_HELP = {
    "single": "single — one device",
    "dp": "dp — nn.DataParallel, one process, batch split over GPUs",
    "ddp": "ddp — DistributedDataParallel under torchrun, one process per GPU (or CPU process)",
}


@st.cache_data(ttl=5, show_spinner=False)
def _snapshot():
    from lab.engine.devices import snapshot

    return snapshot()


snap = _snapshot()
gpu_count = len(snap.gpus)
slots: dict = {}  # field -> placeholder under its widget, for its message
form_errors: list[ConfigError] = []

left, right = st.columns([3, 2])
with left:
    st.subheader("What to run")
    mode = st.radio("Mode", MODES, index=MODES.index(D.mode), key="launch_mode", format_func=MODE_HELP.get)
    slots["mode"] = st.empty()

    if snap.gpus:
        st.write("GPUs")
        gcols = st.columns(min(4, gpu_count))
        gpus = tuple(
            g.index
            for i, g in enumerate(snap.gpus)
            if gcols[i % len(gcols)].checkbox(f"GPU {g.index} · {g.name}", value=i == 0, key=f"launch_gpu_{g.index}")
        )
    else:
        st.info(f"No GPU here — {snap.reason or 'none found: runs use the CPU with the gloo backend'}.")
        gpus = ()
    slots["gpus"] = st.empty()

    if mode == "ddp" and gpus:
        nproc = len(gpus)  # one process per chosen GPU: nothing to choose
        st.caption(f"DDP: {nproc} process(es), one per chosen GPU.")
    else:
        nproc = st.number_input(
            "Processes per node (ddp)", value=2, step=1, key="launch_nproc", disabled=mode != "ddp",
            help="DDP runs one process per GPU; on the CPU each process is one gloo rank.",
        )
    slots["nproc"] = st.empty()

    c1, c2 = st.columns(2)
    model = c1.selectbox("Model", MODELS, index=MODELS.index(D.model), key="launch_model")
    slots["model"] = c1.empty()
    kinds = ["digits", "synthetic", "imagefolder"]
    kind = c2.selectbox("Dataset", kinds, key="launch_dataset_kind",
                        help="digits: the 8×8 sample set shipped in sample_data/; synthetic: random tensors; "
                             "imagefolder: PATH/train/<class>/*, PATH/val/<class>/* or PATH/<class>/*")
    folder = c2.text_input("Image folder path", key="launch_folder") if kind == "imagefolder" else ""
    slots["dataset"] = c2.empty()

    c1, c2, c3 = st.columns(3)
    batch = c1.number_input("Global batch", value=D.batch_size, step=1, key="launch_batch",
                            help="The same in every mode: DP splits it over GPUs, DDP runs batch / world size per rank.")
    slots["batch_size"] = c1.empty()
    epochs = c2.number_input("Epochs", value=ui_text.QUICK_EPOCHS, step=1, key="launch_epochs")
    slots["epochs"] = c2.empty()
    max_steps = c3.number_input("Max steps (0 = no limit)", value=D.max_steps, step=10, key="launch_max_steps")
    slots["max_steps"] = c3.empty()

    c1, c2, c3 = st.columns(3)
    lr = c1.number_input("Learning rate", value=D.lr, step=0.01, format="%.4f", key="launch_lr")
    slots["lr"] = c1.empty()
    seed = c2.number_input("Seed", value=D.seed, step=1, key="launch_seed")
    slots["seed"] = c2.empty()
    amp = c3.checkbox("Mixed precision (AMP)", value=D.amp, key="launch_amp",
                      help="CUDA: fp16 autocast + GradScaler; CPU: bf16 autocast")
    slots["amp"] = c3.empty()

    c1, c2 = st.columns(2)
    name = c1.text_input("Name (optional)", value=D.name, key="launch_name")
    slots["name"] = c1.empty()
    tags_text = c2.text_input("Tags (comma separated)", key="launch_tags")
    slots["tags"] = c2.empty()

    with st.expander("More options"):
        c1, c2, c3 = st.columns(3)
        workers = c1.number_input("DataLoader workers", value=D.workers, step=1, key="launch_workers")
        slots["workers"] = c1.empty()
        log_every = c2.number_input("Log every (steps)", value=D.log_every, step=1, key="launch_log_every")
        slots["log_every"] = c2.empty()
        val_every = c3.number_input("Validate every (steps, 0 = each epoch)", value=D.val_every, step=10, key="launch_val_every")
        slots["val_every"] = c3.empty()
        c1, c2, c3 = st.columns(3)
        image_size = c1.number_input("Image size", value=D.image_size, step=8, key="launch_image_size")
        slots["image_size"] = c1.empty()
        checkpoint = c2.selectbox("Checkpoint", CHECKPOINTS, index=CHECKPOINTS.index(D.checkpoint), key="launch_checkpoint")
        slots["checkpoint"] = c2.empty()
        grad_warn = c3.number_input("Warn above grad norm (0 = off)", value=float(D.grad_norm_warn), step=1.0, key="launch_grad_warn")
        slots["grad_norm_warn"] = c3.empty()
        env_text = st.text_area("Extra environment (KEY=VALUE per line)", key="launch_env", height=80)
        slots["extra_env"] = st.empty()

    with st.expander("Several machines (DDP over nodes)"):
        c1, c2, c3 = st.columns(3)
        nnodes = c1.number_input("Nodes", value=D.nnodes, step=1, key="launch_nnodes")
        slots["nnodes"] = c1.empty()
        node_rank = c2.number_input("This node's rank", value=D.node_rank, step=1, key="launch_node_rank")
        slots["node_rank"] = c2.empty()
        endpoint = c3.text_input("Rendezvous host:port (node 0)", value=D.rdzv_endpoint, key="launch_endpoint")
        slots["rdzv_endpoint"] = c3.empty()

tags = tuple(ui_text.parse_tags(tags_text))
try:
    extra_env = ui_text.parse_env_lines(env_text)
except ValueError as e:
    extra_env = {}
    form_errors.append(ConfigError("extra_env", str(e)))

cfg = RunConfig(
    mode=mode, gpus=gpus, nproc=int(nproc) if mode == "ddp" else 1, nnodes=int(nnodes), node_rank=int(node_rank),
    rdzv_endpoint=endpoint.strip(), model=model,
    dataset=f"imagefolder:{folder.strip()}" if kind == "imagefolder" else kind,
    batch_size=int(batch), epochs=int(epochs), max_steps=int(max_steps), lr=float(lr), amp=bool(amp),
    workers=int(workers), seed=int(seed), name=name.strip(), tags=tags, extra_env=extra_env,
    log_every=int(log_every), val_every=int(val_every), image_size=int(image_size), checkpoint=checkpoint,
    grad_norm_warn=float(grad_warn),
)
found = form_errors + problems(cfg, gpu_count)
by_field: dict[str, list[str]] = {}
for err in found:
    by_field.setdefault(err.field if err.field in slots else "", []).append(err.message)
for fld, msgs in by_field.items():
    (slots[fld] if fld else st).error("  \n".join(msgs))

with right:
    st.subheader("Before launching")
    if found:
        # Listed here too: a field inside a closed expander hides its message.
        st.warning("Fix before launching (also marked next to each field):\n"
                   + "\n".join(f"- **{e.field}**: {ui_text.md_escape(e.message)}" for e in found))
    else:
        from lab.engine import launcher

        run_dir = paths.runs_dir() / "<run-id>"
        try:
            checks = launcher.preflight(cfg, snap)
            argv, env = launcher.build_command(cfg, run_dir, 29500)
            others = launcher.other_node_commands(cfg, run_dir) if cfg.nnodes > 1 else []
        except Exception as e:  # the engine names the fix; never a traceback
            st.error(f"Cannot prepare this run: {e}")
            st.stop()
        st.markdown("**Pre-flight**")
        st.markdown("\n".join(f"- {ui_text.md_escape(line)}" for line in checks))
        st.markdown("**The command that will run** (the port is chosen free at launch)")
        st.code(ui_text.shell_line(argv, ui_text.env_changes(env, dict(os.environ)), cwd=str(paths.REPO_ROOT)), language="bash")
        for i, other in enumerate(others, start=1):
            st.markdown(f"**On node {i}** (same repository, same environment)")
            st.code(ui_text.shell_line(other, cwd=str(paths.REPO_ROOT)), language="bash")
    st.caption(f"Runs are written to `{paths.runs_dir()}`")

    if st.button("Launch", type="primary", key="launch_go"):
        if found:
            st.error("Not launched: fix the fields marked in red first.")
        else:
            from lab.engine import launcher

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
        st.page_link("pages/2_Live.py", label="Watch it live", icon=":material/monitoring:", query_params={"run": last})
