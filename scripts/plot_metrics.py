#!/usr/bin/env python3
"""Plot meshtrain metrics (docs/metrics.md) as PNG curves.

    scripts/plot_metrics.py runs/a/metrics.jsonl [runs/b/metrics.jsonl ...] --out plots/

One figure with a subplot per quantity that any run logged: loss (val_loss dashed), learning rate, gradient
norm, tokens/s, MFU (GPU runs), peak memory, and from the GPU telemetry (the records' "gpu" entries) power,
temperature, SM and memory clocks, one line per rank — each against the step, several runs overlaid and named
in the legend by the shortest path suffix that tells them apart. A panel without data is left out (a CPU run
has no GPU panels); the panels drawn are printed. A step logged twice (a resumed run re-logs the steps
after its checkpoint) keeps its last value. --out is a .png file, or a directory that receives metrics.png.
Mistakes (missing file, malformed line, no step records) are one line on stderr and exit code 2.
"""
import argparse
import json
import math
import os
import sys

PROG = "plot_metrics.py"

# (key, subplot title, y label, log scale, scale factor)
PANELS = [
    ("loss", "loss", "loss", False, 1.0),
    ("lr", "learning rate", "lr", False, 1.0),
    ("grad_norm", "gradient norm (before clipping)", "L2 norm", True, 1.0),
    ("tokens_per_s", "throughput", "tokens/s", False, 1.0),
    ("mfu", "MFU", "MFU", False, 1.0),
    ("peak_memory_bytes", "peak memory", "bytes", False, 1.0),
]
# GPU telemetry, per rank: the record's "gpu": {"RANK": {"power_w": …}} becomes the series "gpu/RANK/power_w".
GPU_PANELS = [
    ("power_w", "GPU power", "W", False, 1.0),
    ("temperature_c", "GPU temperature", "°C", False, 1.0),
    ("sm_clock_mhz", "SM clock", "MHz", False, 1.0),
    ("memory_clock_mhz", "memory clock", "MHz", False, 1.0),
]


def gpu_series(run, field):
    """[(rank, [(step, value)])] of one telemetry field, by rank."""
    out = []
    for key, points in run.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "gpu" and parts[2] == field:
            out.append((int(parts[1]), points))
    return sorted(out)


class UserError(Exception):
    pass


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def load(path):
    """Returns {key: sorted [(step, value)]} for one metrics file."""
    if not os.path.exists(path):
        raise UserError(f"{path}: no such file")
    if os.path.isdir(path):
        raise UserError(f"{path}: is a directory, expected a metrics .jsonl file")
    series = {}
    n_step_records = 0
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})")
    with f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise UserError(f"{path}:{lineno}: malformed line, not JSON ({getattr(e, 'msg', e)})")
            if not isinstance(rec, dict):
                raise UserError(f"{path}:{lineno}: malformed line, expected a JSON object")
            if "step" not in rec:
                continue  # not a step record (future record kinds); ignored
            step = rec["step"]
            if not is_number(step):
                raise UserError(f"{path}:{lineno}: malformed line, 'step' is not a number: {step!r}")
            n_step_records += 1
            for key, value in rec.items():
                if key != "step" and is_number(value):
                    series.setdefault(key, {})[step] = float(value)  # later lines win (resume)
            gpu = rec.get("gpu")
            for rank, reading in (gpu.items() if isinstance(gpu, dict) else []):
                for field, value in (reading.items() if isinstance(reading, dict) else []):
                    if is_number(value):
                        series.setdefault(f"gpu/{rank}/{field}", {})[step] = float(value)
    if n_step_records == 0:
        raise UserError(f"{path}: no step records (expected JSON lines with a \"step\" key, see docs/metrics.md)")
    return {k: sorted(v.items()) for k, v in series.items()}


def labels_for(paths):
    """The shortest path suffixes (file name first) that tell the files apart."""
    parts = [os.path.normpath(os.path.abspath(p)).split(os.sep) for p in paths]
    # meshtrain's default name says nothing: then start with its directory (runs/<name>/metrics.jsonl)
    first = 2 if any(p[-1] == "metrics.jsonl" for p in parts) else 1
    for depth in range(first, max(len(p) for p in parts) + 1):
        labels = [os.sep.join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return list(paths)  # the same file given twice


def output_path(out):
    if out.lower().endswith(".png"):
        return out
    if os.path.exists(out) and not os.path.isdir(out):
        raise UserError(f"--out {out}: exists and is not a directory; give a .png file or a directory")
    return os.path.join(out, "metrics.png")


def plot_gpu_panel(ax, field, name, ylabel, runs, labels, colors):
    """One line per rank (and run); several runs: each run one line style."""
    styles = ["-", "--", ":", "-."]
    for i, (run, label) in enumerate(zip(runs, labels)):
        for rank, points in gpu_series(run, field):
            xs, ys = zip(*points)
            ax.plot(xs, ys, color=colors[rank % len(colors)], linestyle=styles[i % len(styles)], linewidth=1.2,
                    marker="." if len(xs) <= 60 else None, markersize=3,
                    label=f"rank {rank}" if len(runs) == 1 else f"{label} rank {rank}")
    ax.set_title(name)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="best", ncol=2)


def plot(runs, labels, out_png, title):
    try:
        import matplotlib
    except ImportError:
        raise UserError("matplotlib is not installed (pip install matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    panels = [p for p in PANELS if any(p[0] in r for r in runs)]
    if not any("loss" in r for r in runs) and any("val_loss" in r for r in runs):
        panels.insert(0, PANELS[0])
    panels += [p for p in GPU_PANELS if any(gpu_series(r, p[0]) for r in runs)]
    if not panels:
        raise UserError("no plottable metric (loss, val_loss, lr, grad_norm, tokens_per_s, mfu, "
                        "peak_memory_bytes) in " + ", ".join(labels))
    ncols = 1 if len(panels) == 1 else 2
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(7 * ncols, 3.6 * nrows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    for ax, (key, name, ylabel, log, scale) in zip(axes.flat, panels):
        if (key, name, ylabel, log, scale) in GPU_PANELS:
            plot_gpu_panel(ax, key, name, ylabel, runs, labels, colors)
            continue
        if key == "peak_memory_bytes":
            top = max(y for r in runs for _, y in r.get(key, [(0, 0.0)]))
            ylabel, scale = ("GiB", 1.0 / 2**30) if top >= 2**30 else ("MiB", 1.0 / 2**20)
        for i, (run, label) in enumerate(zip(runs, labels)):
            color = colors[i % len(colors)]
            # one run: validation in its own colour; several: each run one colour, validation dashed
            val_color = colors[1] if len(runs) == 1 else color
            if key in run:
                xs, ys = zip(*run[key])
                marker = "." if len(xs) <= 60 else None
                ax.plot(xs, [y * scale for y in ys], color=color, marker=marker, markersize=3, linewidth=1.4,
                        label=label if key != "loss" else f"{label} (train)")
            if key == "loss" and "val_loss" in run:
                xs, ys = zip(*run["val_loss"])
                ax.plot(xs, ys, color=val_color, linestyle="--", marker="o", markersize=5, linewidth=1.6,
                        label=f"{label} (val)")
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        elif key in ("peak_memory_bytes", "tokens_per_s", "mfu"):
            ax.set_ylim(bottom=0)
        if key == "tokens_per_s":
            ax.yaxis.set_major_formatter(EngFormatter(sep=""))
        if key == "lr":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        ax.grid(True, which="major", alpha=0.3)
        if key == "loss" or len(runs) > 1:
            ax.legend(fontsize=8, loc="best")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    print("panels: " + ", ".join(p[1] for p in panels))
    fig.suptitle(title or ("meshtrain: " + ", ".join(labels)), fontsize=11)
    fig.tight_layout()

    parent = os.path.dirname(out_png)
    if parent:
        os.makedirs(parent, exist_ok=True)
    tmp = f"{out_png}.tmp.{os.getpid()}"
    try:
        fig.savefig(tmp, format="png", dpi=110)
        os.replace(tmp, out_png)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise UserError(f"--out {out_png}: cannot write ({e.strerror})")
    finally:
        plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description="Plot meshtrain metrics JSONL files as PNG curves.")
    ap.add_argument("metrics", nargs="+", help="metrics.jsonl files (docs/metrics.md); several are overlaid")
    ap.add_argument("--out", required=True, help="a .png file, or a directory that receives metrics.png")
    ap.add_argument("--title", help="figure title (default: the run names)")
    args = ap.parse_args(argv)
    try:
        runs = [load(p) for p in args.metrics]
        out_png = output_path(args.out)
        labels = labels_for(args.metrics)
        plot(runs, labels, out_png, args.title)
    except UserError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out_png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
