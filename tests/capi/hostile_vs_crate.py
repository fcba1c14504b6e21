"""Holds the SafeTensors table of test_hostile_files.c against the format's reference reader, the
safetensors package (its Rust crate): every case must get the crate's verdict (opens or is refused),
except the differences docs/hostile_files.md lists on purpose.

usage: python3 hostile_vs_crate.py path/to/capi_test_hostile_files
Exits 77 (skipped) when the safetensors package is missing."""
import os
import subprocess
import sys
import tempfile

try:
    from safetensors import safe_open
except ImportError:
    print("no safetensors package: skipped")
    sys.exit(77)

# Cases this reader refuses and the crate accepts, by design (docs/hostile_files.md).
STRICTER = {
    "leading space",                     # the format's text: the header MUST begin with '{'
    "dtype the engine lacks",            # U8 is a format dtype this engine does not have
    "unknown field",                     # the crate ignores unknown fields
    "duplicate names",                   # serde_json keeps the last silently
    "metadata key twice",
    "dim 2^63 with a zero",              # shapes are int64 here
    "escaped NUL in a name",             # no C string can name it
    "escaped NUL alone",
    "escaped NUL in a metadata key",
    "escaped NUL in a metadata value",
}


def crate_verdict(path):
    try:
        with safe_open(path, framework="numpy") as f:
            for key in f.keys():
                f.get_slice(key)
        return "ok", ""
    except Exception as e:  # the crate's errors come as several exception types
        return "refused", f"{type(e).__name__}: {e}"[:120]


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as folder:
        run = subprocess.run([binary], env=dict(os.environ, NX_HOSTILE_DUMP=folder), capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stdout[-4000:], run.stderr[-4000:])
            sys.exit(f"{binary} failed with {run.returncode}")
        agree, known, unexpected = 0, 0, []
        for line in open(os.path.join(folder, "cases.tsv"), encoding="utf-8"):
            index, ours, what = line.rstrip("\n").split("\t")
            theirs, why = crate_verdict(os.path.join(folder, index + ".safetensors"))
            if ours == theirs:
                agree += 1
            elif what in STRICTER and ours == "refused":
                known += 1
            else:
                unexpected.append(f"case {index} ({what}): NexusGrad {ours}, the crate {theirs} {why}")
    for u in unexpected:
        print(u)
    print(f"{agree + known + len(unexpected)} SafeTensors cases against the crate: {agree} same verdict, "
          f"{known} refused here on purpose, {len(unexpected)} unexpected differences")
    sys.exit(1 if unexpected else 0)


if __name__ == "__main__":
    main()
