#!/usr/bin/env bash
# The ABI check of the append-only policy (nexus.h, rule 5): compares the public ABI of a built
# libnexus.so (functions, and the types of include/nexus.h they use) with the committed baseline
# abi/nexus.abi, using libabigail's abidiff. Added functions pass; anything else that changed (a
# function removed, a parameter or struct field changed, an enum value renumbered) fails, and must
# either be undone or land with NX_ABI_VERSION bumped and the baseline regenerated on purpose.
#   scripts/abi_check.sh BUILD_DIR            check (the build needs debug info: RelWithDebInfo)
#   scripts/abi_check.sh BUILD_DIR --update   rewrite abi/nexus.abi from BUILD_DIR's library
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: scripts/abi_check.sh BUILD_DIR [--update]}
lib=$(find "$build" -maxdepth 1 -name 'libnexus.so.*.*' -o -maxdepth 1 -name libnexus.so | sort | tail -1)
baseline=$root/abi/nexus.abi
# Only the exported functions (src/capi/nexus.map: nx_*) and the types of include/nexus.h; the
# handle structs stay declaration-only, so the engine's internals are not part of the ABI.
filters=(--headers-dir "$root/include" --drop-private-types --exported-interfaces-only)
[ -n "$lib" ] || { echo "abi_check: no libnexus.so in $build" >&2; exit 2; }
command -v abidiff >/dev/null || { echo "abi_check: abidiff missing (scripts/deps.sh installs abigail-tools)" >&2; exit 2; }
if ! readelf -S "$lib" | grep -q '\.debug_info'; then
  echo "abi_check: $lib has no debug info; build with -DCMAKE_BUILD_TYPE=RelWithDebInfo" >&2
  exit 2
fi
if [ "${2:-}" = --update ]; then
  mkdir -p "$root/abi"
  abidw "${filters[@]}" --no-show-locs --no-corpus-path --out-file "$baseline" "$lib"
  echo "abi_check: wrote $baseline from $lib"
  exit 0
fi
set +e
# No header filter on this side: the baseline carries no source locations, and abidiff would then
# take every type for private and drop it, letting a changed struct of nexus.h through.
abidiff --no-added-syms --exported-interfaces-only "$baseline" "$lib"
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
  echo "abi_check: libnexus's ABI differs from abi/nexus.abi (abidiff status $rc, above). The API is" >&2
  echo "append-only (nexus.h, rule 5). A field appended to a struct_size struct is compatible: regenerate" >&2
  echo "the baseline in the same commit (scripts/abi_check.sh BUILD_DIR --update). Anything else: undo it," >&2
  echo "or bump NX_ABI_VERSION and NX_VERSION_MAJOR and regenerate the baseline." >&2
  exit 1
fi
echo "abi_check: the ABI of $lib matches abi/nexus.abi (added functions allowed)"
