#!/usr/bin/env bash
# Usage: scripts/device_code_diff.sh REV src/cuda/FILE.cu [...]
#
# Whether a change to CUDA sources changes the code the GPU runs: each file is compiled twice as
# the CUDA build compiles it (build-cuda's ninja command, all its architectures), from git
# revision REV and from the working tree, and the device ELF of the two objects is compared
# (cuobjdump -elf: the SASS with its scheduling control bits, constant banks, register and
# shared-memory attributes). Identical device ELF means a kernel refactor needs no new GPU run;
# any difference, however small, does. Run it on a configured CUDA build (scripts/build.sh cuda
# or CI's configuration). cuobjdump comes from the CUDA toolkit where it has one, else from PyPI's
# nvidia-cuda-cuobjdump wheel into build-tools/ (the toolkit here ships nvcc and ptxas only).
# KEEP_DUMPS=DIR keeps both dumps (FILE.old.elf, FILE.new.elf) there, to see what differs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-cuda}
[ $# -ge 2 ] || { echo "usage: $0 REV src/cuda/FILE.cu [...]" >&2; exit 2; }
rev=$1; shift
[ -f "$build/build.ninja" ] || { echo "$0: no configured CUDA build in $build" >&2; exit 2; }

# cuobjdump, and nvdisasm beside it for the SASS
cuobjdump=$(command -v cuobjdump || true)
if [ -z "$cuobjdump" ] || ! command -v nvdisasm >/dev/null; then
  tools=$root/build-tools
  cuobjdump=$(find "$tools" -name cuobjdump -type f 2>/dev/null | head -1 || true)
  if [ -z "$cuobjdump" ]; then
    python3 -m pip install -q --root-user-action=ignore --target "$tools" "nvidia-cuda-cuobjdump>=13,<14" \
      "nvidia-cuda-nvdisasm>=13,<14" >&2
    cuobjdump=$(find "$tools" -name cuobjdump -type f | head -1)
  fi
  export NVDISASM_PATH=$(dirname "$(find "$tools" -name nvdisasm -type f | head -1)")
fi

work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$root" worktree add -q --detach "$work/old" "$rev"
# the build's layer include directory holds links to src/core and src/cuda: the old tree gets its own
mkdir -p "$work/old-layers"
ln -s "$work/old/src/core" "$work/old-layers/core"
ln -s "$work/old/src/cuda" "$work/old-layers/cuda"

status=0
for file in "$@"; do
  name=$(basename "$file" .cu)
  object=$(cd "$build" && ninja -t targets all | grep -o "^[^:]*/$name\.cu\.o" | head -1)
  [ -n "$object" ] || { echo "$file: not a source of the CUDA build" >&2; status=2; continue; }
  command=$(cd "$build" && ninja -t commands "$object" | tail -1)
  command=${command//\/usr\/bin\/ccache /}
  command=$(sed -E 's/ -MD -MT [^ ]+ -MF [^ ]+//; s/ -o [^ ]+/ -o OBJECT/' <<<"$command")
  for side in old new; do
    if [ $side = old ]; then
      cmd=${command//$build\/layers\/cuda/$work\/old-layers}
      cmd=${cmd//$root\/include/$work\/old\/include}
      cmd=${cmd//$root\/$file/$work\/old\/$file}
    else
      cmd=$command
    fi
    (cd "$build" && eval "${cmd/OBJECT/$work/$name.$side.o}")
    # nvcc names a file's anonymous namespace after a hash of its path: the same on both sides
    { "$cuobjdump" -elf "$work/$name.$side.o" && "$cuobjdump" -sass "$work/$name.$side.o"; } |
      sed -E 's/_GLOBAL__N__[0-9a-f]+_[0-9]+_[A-Za-z0-9_]+_cu_[0-9a-f]{8}/_GLOBAL__N_/g' >"$work/$name.$side.elf"
  done
  [ -z "${KEEP_DUMPS:-}" ] || cp "$work/$name.old.elf" "$work/$name.new.elf" "$KEEP_DUMPS/"
  if cmp -s "$work/$name.old.elf" "$work/$name.new.elf"; then
    echo "$file: device code identical ($(grep -c 'Function :' "$work/$name.new.elf" || true) functions, $(wc -c <"$work/$name.new.elf") bytes of ELF dump)"
  else
    echo "$file: device code DIFFERS ($(diff "$work/$name.old.elf" "$work/$name.new.elf" | grep -c '^[<>]') lines of the ELF dump)"
    status=1
  fi
done
exit $status
