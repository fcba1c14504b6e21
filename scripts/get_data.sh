#!/usr/bin/env bash
# Extracts the offline corpora into data/ without installing their packages (Debian's archive):
# Moby Dick from golang-github-colinmarc-hdfs-dev, the Jargon File from jargon-text.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -s data/mobydick.txt ]; then
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  (cd "$tmp" && { apt-get download golang-github-colinmarc-hdfs-dev >/dev/null 2>&1 \
     || { "${sudo_cmd[@]}" apt-get update -qq && apt-get download golang-github-colinmarc-hdfs-dev >/dev/null 2>&1; }; })
  dpkg-deb --fsys-tarfile "$tmp"/golang-github-colinmarc-hdfs-dev_*.deb \
    | tar -xO ./usr/share/gocode/src/github.com/colinmarc/hdfs/testdata/mobydick.txt > data/mobydick.txt
fi
echo "data/mobydick.txt: $(wc -c < data/mobydick.txt) bytes"
