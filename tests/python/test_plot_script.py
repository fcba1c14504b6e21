"""scripts/plot.py, the matplotlib renderer of the C examples' CSV files (issue 19): each kind of
CSV (loss curves, per-epoch loss and accuracy, confusion matrix) becomes a PNG that decodes, has
the size the script promises and is not blank; bad input and a missing matplotlib give a
message and a non-zero exit. Needs no nexusgrad: ctest runs it alone with --noconftest
(examples.plot_script) as well as with the rest of tests/python."""
import importlib.util
import math
import os
import random
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "plot.py")
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
           "Ankle boot"]

needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason=f"matplotlib is not installed for {sys.executable} (Debian: apt-get install python3-matplotlib)")


def run_script(*args, env=None):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, env=env, timeout=120)


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def loss_csv(path, steps=120, every=20):
    rng = random.Random(1)
    lines = ["step,train_loss,val_loss"]
    for s in range(steps + 1):
        train = f"{4 + 2.5 * math.exp(-s / 30) + rng.gauss(0, 0.08):.6f}" if s < steps else ""
        val = f"{4.1 + 2.4 * math.exp(-s / 30):.6f}" if s % every == 0 or s == steps else ""
        lines.append(f"{s},{train},{val}")
    return write(path, lines)


def epochs_csv(path, epochs=5):
    return write(path, ["epoch,train_loss,test_accuracy"]
                 + [f"{e},{0.7 / math.sqrt(e):.5f},{0.80 + 0.015 * e:.4f}" for e in range(1, epochs + 1)])


def confusion_csv(path):
    rng = random.Random(2)
    rows = []
    for i, name in enumerate(CLASSES):
        counts = [rng.randint(0, 40) for _ in CLASSES]
        counts[i] = 800 + rng.randint(0, 150)
        rows.append(",".join([name] + [str(c) for c in counts]))
    return write(path, ["true_class," + ",".join(CLASSES)] + rows)


def check_png(path, width, height):
    """The PNG decodes with matplotlib, has the size asked for, and shows a real picture: many
    colours, mostly white background, and dark pixels (axes and text)."""
    import matplotlib.image
    import numpy as np

    assert os.path.isfile(path), path
    image = matplotlib.image.imread(path)
    assert image.shape[:2] == (height, width), image.shape
    rgb = (np.asarray(image)[..., :3] * 255).round().astype(np.uint8).reshape(-1, 3)
    colours = np.unique(rgb, axis=0)
    assert len(colours) >= 20, f"{len(colours)} distinct colours"
    white = np.all(rgb >= 250, axis=1).mean()
    dark = np.all(rgb <= 60, axis=1).mean()
    assert 0.3 < white < 0.98, f"white fraction {white:.3f}"
    assert dark > 0.002, f"dark fraction {dark:.4f}"  # the frame, ticks, labels, title
    return rgb


@needs_matplotlib
def test_each_kind_renders(tmp_path):
    loss = loss_csv(tmp_path / "loss_curve.csv")
    epochs = epochs_csv(tmp_path / "fashion_mnist_mlp_epochs.csv")
    confusion = confusion_csv(tmp_path / "fashion_mnist_mlp_confusion.csv")
    result = run_script("--title", "it's a \"test\" $(x)", loss, epochs, confusion)
    assert result.returncode == 0, result.stderr
    for csv_path in (loss, epochs, confusion):
        assert f"wrote {csv_path[:-4]}.png" in result.stdout
    blue = check_png(str(tmp_path / "loss_curve.png"), 800, 480)
    # both series are drawn in their colours (matplotlib's tab:blue and tab:orange)
    import numpy as np

    assert np.all(np.abs(blue.astype(int) - [31, 119, 180]) <= 8, axis=1).sum() > 500
    assert np.all(np.abs(blue.astype(int) - [255, 127, 14]) <= 8, axis=1).sum() > 200
    check_png(str(tmp_path / "fashion_mnist_mlp_epochs.png"), 1000, 420)
    check_png(str(tmp_path / "fashion_mnist_mlp_confusion.png"), 800, 700)


@needs_matplotlib
def test_out_option_and_odd_names(tmp_path):
    odd = tmp_path / "l'été $(touch pwned)"
    odd.mkdir()
    loss = loss_csv(odd / "loss.csv", steps=3, every=1)  # a very short run
    result = run_script("--out", str(odd / "picture.png"), loss)
    assert result.returncode == 0, result.stderr
    check_png(str(odd / "picture.png"), 800, 480)
    assert not (tmp_path / "pwned").exists() and not os.path.exists("pwned")
    one = epochs_csv(tmp_path / "one_epoch.csv", epochs=1)  # a single point still shows
    assert run_script(one).returncode == 0
    check_png(str(tmp_path / "one_epoch.png"), 1000, 420)


@needs_matplotlib
def test_bad_input_is_refused(tmp_path):
    bad_header = write(tmp_path / "bad.csv", ["when,what", "1,2"])
    ragged = write(tmp_path / "ragged.csv", ["step,train_loss,val_loss", "0,1.0", "1,0.9,0.8"])
    not_number = write(tmp_path / "nan.csv", ["epoch,train_loss,test_accuracy", "1,abc,0.5"])
    header_only = write(tmp_path / "empty.csv", ["step,train_loss,val_loss"])
    good = epochs_csv(tmp_path / "good.csv")
    for path, says in [(bad_header, "unknown header"), (ragged, "line 2 has 2 fields"),
                       (not_number, "abc"), (header_only, "no rows"),
                       (str(tmp_path / "missing.csv"), "No such file")]:
        result = run_script(path, good)
        assert result.returncode == 1, (path, result.stdout, result.stderr)
        assert path in result.stderr and says in result.stderr, result.stderr
        assert not os.path.exists(path[:-4] + ".png")
        assert os.path.exists(str(tmp_path / "good.png"))  # the other file is still drawn
    result = run_script("--out", "x.png", good, good)
    assert result.returncode == 2 and "--out takes one CSV file" in result.stderr


def test_without_matplotlib_says_how_to_install(tmp_path):
    fake = tmp_path / "fake" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "fake"))
    result = run_script(epochs_csv(tmp_path / "e.csv"), env=env)
    assert result.returncode == 3, result.stderr
    assert "python3-matplotlib" in result.stderr and "pip install matplotlib" in result.stderr
    assert not (tmp_path / "e.png").exists()
