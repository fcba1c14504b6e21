#!/usr/bin/env bash
# Draws the engine's layers (src/<folder>, one CMake object library each) and which may use which,
# from CMake's own target graph: scripts/layer_graph.sh [BUILD_DIR] -> docs/architecture.{dot,svg}
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
tmp=$(mktemp -d)
cmake -S . -B "$dir" --graphviz="$tmp/targets.dot" >/dev/null
/usr/bin/python3 - "$tmp" <<'PY'
import glob, re, sys
tmp = sys.argv[1]
names, edges = {}, set()
# CMake writes the whole graph and one file per target; the whole graph is targets.dot.
for line in open(f"{tmp}/targets.dot"):
    m = re.match(r'\s*"(node\d+)" \[ label = "([^"]+)"', line)
    if m:
        names[m.group(1)] = m.group(2)
    m = re.match(r'\s*"(node\d+)" -> "(node\d+)"', line)
    if m:
        edges.add((m.group(1), m.group(2)))
layer = lambda n: names.get(n, "").removeprefix("nexus_layer_") if names.get(n, "").startswith("nexus_layer_") else None
out = ["digraph layers {", "  rankdir=BT;", '  node [shape=box, fontname="Helvetica"];',
       '  label="src/ layers: an arrow points to a layer whose headers the other may include";']
for n in sorted({layer(n) for n in names if layer(n)}):
    out.append(f'  "{n}";')
for a, b in sorted(edges):
    if layer(a) and layer(b):
        out.append(f'  "{layer(a)}" -> "{layer(b)}";')
out.append("}")
open("docs/architecture.dot", "w").write("\n".join(out) + "\n")
PY
dot -Tsvg docs/architecture.dot -o docs/architecture.svg
dot -Tpng docs/architecture.dot -o docs/architecture.png
rm -rf "$tmp"
echo "wrote docs/architecture.dot, .svg, .png"
