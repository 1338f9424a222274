#!/usr/bin/env bash
# Prompt-injection detector evaluation on real Debian documents.
#
# Installs the Debian *-doc packages that supply the negatives (needs root
# and network to Debian), builds the release golem-worker, picks >= 300 real
# documents (HTML, text, Markdown, PDF, JSON, CSV; deterministic), runs
# `golem-worker report` on them, plants every attack of eval/dev.jsonl,
# eval/dev2.jsonl, dev3.jsonl and heldout3.jsonl into clean ones (visible and hidden placements), runs
# the worker again and prints: the share of negatives with a HIGH
# prompt_injection warning, and recall per set and per placement.
# Nothing it writes is committed: scratch space is $EVAL_WORK
# (default /tmp/golem-injection-eval).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="${EVAL_WORK:-/tmp/golem-injection-eval}"
packages=(python3-doc debian-reference-en camlidl-doc gri-pdf-doc ghostscript-doc git-doc
          iso-codes distro-info-data)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi

(cd "$repo" && cargo build --release -q -p golem-worker)
worker="$(cd "$repo" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/golem-worker"

rm -rf "$work"
mkdir -p "$work"
python3 "$here/evaluate.py" pick "$work"
run() { # input output count
    mkdir -p "$2"
    "$worker" report --input "$1" --output "$2" --jobs 2 --max-inputs "$3" \
        --max-output-bytes 2g --per-input-timeout 60s >/dev/null 2>"$2.log" || true
}
n=$(find "$work/neg" -type f | wc -l)
run "$work/neg" "$work/out-neg" "$n"
python3 "$here/evaluate.py" plant "$work" "$here"
n=$(find "$work/planted" -type f | wc -l)
run "$work/planted" "$work/out-planted" "$n"
python3 "$here/evaluate.py" score "$work"
