#!/usr/bin/env python3
"""Experiment tracking: the resolved config as hyperparameters, samples as text, W&B offline (tier 4, CPU).

  a run of 4 steps under meshrun (2 ranks), samples every 2 steps, logging.tensorboard and logging.wandb: offline:
  - TensorBoard: the event file holds the hparams plugin's session start (read with the `tensorboard` package's
    own protobufs) with every key of the resolved config at its value (numbers, booleans, strings), the config
    as text, and the samples as text;
  - W&B: <out_dir>/wandb/offline-run-*/run-<id>.wandb, read back with wandb's own Record protobufs, holds the
    resolved config as the run's config, the loss of every logged step, and the samples table; rank 0 only;
  - a resume (2 more steps) continues the same W&B run id;
  - a Python without the `wandb` package (the same Python with -S) or a missing one: one line naming
    logging.wandb / logging.wandb_python, exit 2.
Exit code 77 (skipped) without the tensorboard or wandb package.
Usage: tracking_test.py BIN_DIR
"""
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

try:
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.plugins.hparams import plugin_data_pb2
    from wandb.proto import wandb_internal_pb2
except ImportError as e:
    print(f"skipped: {e} ({sys.executable} -m pip install tensorboard wandb)")
    sys.exit(77)

from e2e_support import Checks, metrics, run, run_checked, tiny_synthetic_config

bin_dir = sys.argv[1]
meshrun = os.path.join(bin_dir, "meshrun")
work = tempfile.mkdtemp(prefix="meshtrain_tracking_")
out_dir, tb_dir = os.path.join(work, "run"), os.path.join(work, "tb")
config = tiny_synthetic_config(work, out_dir, 4,
                               train={"sample_tokens": 4, "sample_every": 2, "sample_prompt": "In the"},
                               logging={"every": 1, "tensorboard": tb_dir, "wandb": "offline",
                                        "wandb_python": sys.executable})
check = Checks()
# The job's W&B settings come from the config only: nothing of the caller's W&B environment.
env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}


def resolved_config():
    out = subprocess.run([os.path.join(bin_dir, "meshtrain"), "config", config, "--json"], capture_output=True,
                         text=True, timeout=60, env=env)
    if out.returncode != 0:
        sys.exit(f"meshtrain config --json failed: {out.stderr}")
    return json.loads(out.stdout)


def tensorboard_events():
    files = glob.glob(os.path.join(tb_dir, "events.out.tfevents.*"))
    check(len(files) == 1, f"one event file: {files}")
    return list(event_file_loader.EventFileLoader(files[0]).Load()) if files else []


def hparams_of(events):
    for e in events:
        for v in e.summary.value:
            if v.metadata.plugin_data.plugin_name == "hparams":
                data = plugin_data_pb2.HParamsPluginData.FromString(v.metadata.plugin_data.content)
                return v.tag, data
    return None, None


def texts_of(events):
    return {(v.tag, e.step): v.tensor.string_val[0].decode() for e in events for v in e.summary.value
            if v.metadata.plugin_data.plugin_name == "text"}


def check_tensorboard(cfg):
    events = tensorboard_events()
    tag, data = hparams_of(events)
    check(tag == "_hparams_/session_start_info", f"the hparams plugin's session start is written ({tag})")
    if data is None:
        return
    hp = data.session_start_info.hparams
    want = {f"{s}.{k}": v for s, keys in cfg.items() for k, v in keys.items()}
    check(set(hp) == set(want), f"every config key is a hyperparameter (missing {sorted(set(want) - set(hp))[:5]})")
    check(hp["train.steps"].number_value == 4 and hp["model.d_model"].number_value == 32,
          "numbers as numbers (train.steps 4, model.d_model 32)")
    check(hp["train.device"].string_value == "cpu" and hp["logging.wandb"].string_value == "offline",
          "strings as strings (train.device cpu, logging.wandb offline)")
    check(hp["checkpoint.save_final"].bool_value is True, "booleans as booleans (checkpoint.save_final)")
    texts = texts_of(events)
    check(any(t == "config" and "d_model: 32" in x for (t, _), x in texts.items()), "the config as text")
    check({s for (t, s) in texts if t.startswith("sample")} == {2, 4}, f"samples as text at steps 2 and 4: {texts.keys()}")


def wandb_records(path):
    """The Record protobufs of a .wandb file: wandb's log format, LevelDB's framing (a 7-byte file header
    ":W&B" + magic 0xBEE1 + version; 32 KiB blocks of records [crc32 u32, length u16, type u8: 1 full,
    2 first, 3 middle, 4 last], a block tail under 7 bytes padding)."""
    with open(path, "rb") as f:
        data = f.read()
    ident, magic, _ = struct.unpack("<4sHB", data[:7])
    check(ident == b":W&B" and magic == 0xBEE1, f"{path} starts with W&B's header")
    pos, parts, bad_crc = 7, b"", []
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:
            pos += 32768 - pos % 32768
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0:
            break
        if zlib.crc32(bytes([kind]) + chunk) != crc:
            bad_crc.append(pos)
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(parts)
            yield rec
    check(not bad_crc, f"every record's CRC-32 holds (bad at {bad_crc[:3]})")


def wandb_run(run_dir):
    """(config items, {step: history row}) of one offline run file."""
    config, history = {}, {}
    for rec in wandb_records(glob.glob(os.path.join(run_dir, "run-*.wandb"))[0]):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            config.update({i.key: json.loads(i.value_json) for i in rec.run.config.update})
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in rec.config.update})
        elif kind == "history":
            row = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
            history[row["_step"]] = row
    return config, history


def check_wandb(cfg, run_id):
    runs = sorted(glob.glob(os.path.join(out_dir, "wandb", "offline-run-*")))
    check(len(runs) == 1, f"one offline run directory (rank 0 only): {runs}")
    check(os.path.exists(os.path.join(runs[0], f"run-{run_id}.wandb")) if runs else False,
          f"the run file is named by the kept id {run_id}")
    if not runs:
        return
    config, history = wandb_run(runs[0])
    values = {k: (v["value"] if isinstance(v, dict) and "value" in v else v) for k, v in config.items()}
    check(values.get("train") == cfg["train"] and values.get("model") == cfg["model"],
          f"the resolved config is the run's config ({sorted(values)})")
    losses = {r["step"]: r["loss"] for r in metrics(out_dir) if "loss" in r}
    got = {s: h.get("loss") for s, h in history.items() if "loss" in h}
    check(got == losses, f"the loss of every logged step: {got} vs {losses}")
    tables = [h for s, h in sorted(history.items()) if h.get("samples/_type") == "table-file"]
    check([h["_step"] for h in tables] == [2, 4], f"the samples table is logged at steps 2 and 4: {len(tables)}")
    if tables:
        with open(os.path.join(runs[0], "files", tables[-1]["samples/path"])) as f:
            table = json.load(f)
        check(table["columns"] == ["step", "tag", "text"] and [r[0] for r in table["data"]] == [2, 4] and
              all("In the" in r[2] for r in table["data"]),
              f"the last table holds both samples with their prompt: {table.get('data')}")


def main():
    cfg = resolved_config()
    run([meshrun, "--standalone", "--nproc-per-node", "2", config], env=env)
    check_tensorboard(cfg)
    with open(os.path.join(out_dir, "wandb", "run_id")) as f:
        run_id = f.read().strip()
    check_wandb(cfg, run_id)

    run([meshrun, "--standalone", "--nproc-per-node", "2", config, "--set", "train.steps=6",
         "--set", "checkpoint.resume=auto"], env=env)
    runs = sorted(glob.glob(os.path.join(out_dir, "wandb", "offline-run-*", f"run-{run_id}.wandb")))
    check(len(runs) == 2, f"the resumed run continues W&B run {run_id}: {runs}")

    no_wandb = os.path.join(work, "python-without-wandb")
    with open(no_wandb, "w") as f:
        f.write(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    os.chmod(no_wandb, 0o755)
    for python, key in ((no_wandb, "logging.wandb:"), (os.path.join(work, "nopython"), "logging.wandb_python:")):
        p = subprocess.run([os.path.join(bin_dir, "meshtrain"), "train", config, "--overwrite",
                            "--set", f"logging.wandb_python={python}"], capture_output=True, text=True,
                           timeout=300, env=env)
        err = [line for line in p.stderr.splitlines() if line.strip()]
        check(p.returncode == 2 and len(err) >= 1 and err[-1].find(key) >= 0,
              f"{python}: exit 2 and one line naming {key} (got {p.returncode}, {err[-3:]})")


run_checked(main, check, work)
