#!/usr/bin/python3
"""Renders the CSV files that the C examples write into PNG plots, with matplotlib.

    /usr/bin/python3 scripts/plot.py [--title TITLE] [--out PNG] FILE.csv [FILE.csv ...]

Each CSV becomes a PNG beside it (FILE.png; --out names it when there is one CSV). The kind of
plot follows from the CSV's header:
  step,train_loss,val_loss           loss curves (examples/c/train_gpt.c); empty fields are steps
                                     where that loss was not measured
  epoch,train_loss,test_accuracy     train loss and test accuracy per epoch (train_fashion_mnist.c)
  true_class,<class names...>        a confusion matrix: one row per true class, counts of each
                                     predicted class, drawn as an annotated heat map

matplotlib is Debian's python3-matplotlib (installed by scripts/deps.sh); the Agg backend draws
without a display. Exit status: 0, 1 for a file it cannot read or plot, 3 without matplotlib.
"""
import argparse
import csv
import math
import os
import sys

LOSS_SIZE = (8.0, 4.8)  # inches at DPI: 800 x 480 pixels
EPOCHS_SIZE = (10.0, 4.2)  # 1000 x 420
CONFUSION_SIZE = (8.0, 7.0)  # 800 x 700
DPI = 100


def load_matplotlib():
    """pyplot on the Agg backend, or exit 3 saying how to install matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        sys.stderr.write(
            f"scripts/plot.py needs matplotlib ({err}): on Debian `sudo apt-get install python3-matplotlib` "
            f"(scripts/deps.sh installs it), or `{sys.executable} -m pip install matplotlib`\n")
        sys.exit(3)
    return plt


def read_table(path):
    """The header and the rows (lists of strings) of a CSV file."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = [row for row in csv.reader(f) if row]
    if not rows:
        raise ValueError("empty file")
    header, body = rows[0], rows[1:]
    for i, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise ValueError(f"line {i} has {len(row)} fields, the header {len(header)}")
    return header, body


def number(field):
    """A CSV field as a float; an empty field (not measured) is NaN."""
    return float(field) if field.strip() else math.nan


def columns(header, body, names):
    """The named columns as lists of floats, in the order of names."""
    index = {name: i for i, name in enumerate(header)}
    return [[number(row[index[name]]) for row in body] for name in names]


def present(xs, ys):
    """The (x, y) pairs whose y was measured."""
    pairs = [(x, y) for x, y in zip(xs, ys) if not math.isnan(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def moving_average(values, window):
    """The mean of the last `window` values at each point (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def wants_log_scale(values):
    """A log y axis when the values are positive and span more than a factor of 5: the late, slow
    part of a loss curve is then not squeezed flat by the first steps."""
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) > 5


def plot_loss(plt, header, body, title):
    step, train, val = columns(header, body, ["step", "train_loss", "val_loss"])
    fig, ax = plt.subplots(figsize=LOSS_SIZE, dpi=DPI)
    tx, ty = present(step, train)
    vx, vy = present(step, val)
    window = len(ty) // 25  # a long, noisy run also gets a moving average; a short one is readable as is
    if ty and window >= 4:
        ax.plot(tx, ty, color="tab:blue", alpha=0.3, linewidth=0.8, label="train (each step)")
        ax.plot(tx, moving_average(ty, window), color="tab:blue", linewidth=2, label=f"train (mean of {window} steps)")
    elif ty:
        ax.plot(tx, ty, color="tab:blue", linewidth=1.5, label="train")
    if vy:
        ax.plot(vx, vy, color="tab:orange", marker="o", linewidth=2, label="validation")
        best = min(range(len(vy)), key=vy.__getitem__)
        late = vx[best] > (vx[0] + vx[-1]) / 2  # keep the label inside the axes
        ax.annotate(f"best {vy[best]:.3f}", (vx[best], vy[best]), textcoords="offset points", xytext=(0, 10),
                    ha="right" if late else "left", color="tab:orange")
    if wants_log_scale(ty + vy):
        ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy loss (nats per token)")
    ax.set_title(f"{title}: loss per step" if title else "loss per step")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right")
    return fig


def plot_epochs(plt, header, body, title):
    epoch, loss, accuracy = columns(header, body, ["epoch", "train_loss", "test_accuracy"])
    fig, (left, right) = plt.subplots(1, 2, figsize=EPOCHS_SIZE, dpi=DPI)
    lx, ly = present(epoch, loss)
    left.plot(lx, ly, color="tab:blue", marker="o", label="train loss (mean over the epoch)")
    left.set_xlabel("epoch")
    left.set_ylabel("cross-entropy loss")
    left.set_title("training loss")
    ax, ay = present(epoch, accuracy)
    right.plot(ax, [100 * a for a in ay], color="tab:green", marker="o", label="test accuracy")
    if ay:
        right.annotate(f"{100 * ay[-1]:.2f}%", (ax[-1], 100 * ay[-1]), textcoords="offset points", xytext=(-8, -4),
                       ha="right", va="top", color="tab:green")
    right.set_xlabel("epoch")
    right.set_ylabel("test accuracy (%)")
    right.set_title("test accuracy")
    for panel in (left, right):
        panel.xaxis.get_major_locator().set_params(integer=True)
        panel.grid(True, alpha=0.3)
        panel.legend(loc="best")
    fig.suptitle(f"{title}: per epoch" if title else "per epoch")
    return fig


def plot_confusion(plt, header, body, title):
    predicted = header[1:]
    true = [row[0] for row in body]
    counts = [[number(v) for v in row[1:]] for row in body]
    total = sum(sum(row) for row in counts)
    correct = sum(counts[i][i] for i in range(min(len(true), len(predicted))) if true[i] == predicted[i])
    fig, ax = plt.subplots(figsize=CONFUSION_SIZE, dpi=DPI)
    image = ax.imshow(counts, cmap="Blues")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="images")
    ax.set_xticks(range(len(predicted)), labels=predicted, rotation=45, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(len(true)), labels=true)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    peak = max((v for row in counts for v in row), default=0)
    for i, row in enumerate(counts):
        for j, v in enumerate(row):  # dark text on light cells, white on dark ones
            ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=8,
                    color="white" if peak and v > 0.6 * peak else "black")
    name = f"{title}: confusion matrix" if title else "confusion matrix"
    accuracy = f"\n{correct:.0f} of {total:.0f} test images right ({100 * correct / total:.2f}%)" if total else ""
    ax.set_title(name + accuracy)
    return fig


KINDS = {  # the first columns of the header -> how to plot it
    ("step", "train_loss", "val_loss"): plot_loss,
    ("epoch", "train_loss", "test_accuracy"): plot_epochs,
    ("true_class",): plot_confusion,
}


def render(plt, path, title, out):
    header, body = read_table(path)
    for prefix, plot in KINDS.items():
        if tuple(header[:len(prefix)]) == prefix:
            break
    else:
        raise ValueError(f"unknown header {','.join(header)!r}; expected one of "
                         + "; ".join(",".join(k) + ("..." if len(k) == 1 else "") for k in KINDS))
    if not body:
        raise ValueError("no rows after the header")
    fig = plot(plt, header, body, title)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)  # no bbox_inches="tight": the size stays the one asked for
    plt.close(fig)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", nargs="+", help="CSV files written by the C examples")
    parser.add_argument("--title", help="the plot's title (a default names the kind of plot)")
    parser.add_argument("--out", help="the PNG to write (one CSV only; default: the CSV's name with .png)")
    args = parser.parse_args(argv)
    if args.out and len(args.csv) > 1:
        parser.error("--out takes one CSV file")
    plt = load_matplotlib()
    failed = 0
    for path in args.csv:
        out = args.out or os.path.splitext(path)[0] + ".png"
        try:
            render(plt, path, args.title, out)
            print(f"wrote {out}")
        except (OSError, ValueError, UnicodeDecodeError) as err:
            sys.stderr.write(f"scripts/plot.py: {path}: {err}\n")
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
