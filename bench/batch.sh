#!/usr/bin/env bash
# Batch throughput, side by side in one run: `golem-orch batch` against `xargs -P N docker run
# --rm` doing the same work (same image, worker command, hardening and one document per
# container; the docker baseline bind-mounts its output and does no validation, staging or
# audit). Then the orchestrator's peak memory over a large batch at --jobs 16.
#   bench/batch.sh [DOCS] [JOBS] [MEMDOCS]     (defaults: 200 4 500)
set -euo pipefail
cd "$(dirname "$0")/.."
docs=${1:-200}; jobs=${2:-4}; memdocs=${3:-500}
cargo build --release -q -p golem-orch
golem=$PWD/target/release/golem-orch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOLEM_HOME=$work/home
mkdir -p "$work/docs"
for i in $(seq 1 "$memdocs"); do printf 'document %s\nsecond line\n' "$i" > "$work/docs/d$i.txt"; done
mkdir -p "$work/small"; for i in $(seq 1 "$docs"); do cp "$work/docs/d$i.txt" "$work/small/"; done
"$golem" image build >/dev/null
tag=$("$golem" doctor --json | python3 -c 'import json,sys; print([c["detail"].split()[0] for c in json.load(sys.stdin)["checks"] if c["check"]=="image"][0])')

one() {   # the docker baseline for one document
  local f=$1 out; out=$(mktemp -d -p "$work/out"); chmod 777 "$out"
  docker run --rm --network none --read-only --cap-drop ALL --security-opt no-new-privileges:true \
    --user 65534:65534 --memory 512m --memory-swap 512m --cpus 1 --pids-limit 64 \
    --tmpfs /tmp:rw,noexec,nosuid,nodev,size=64m --log-opt max-size=1m \
    --mount "type=bind,source=$f,target=/input/$(basename "$f"),readonly" \
    --mount "type=bind,source=$out,target=/output" "$tag" report >/dev/null 2>&1
}
export -f one; export work tag
mkdir -p "$work/out"

t0=$(date +%s%N)
ls "$work"/small/*.txt | xargs -P "$jobs" -I{} bash -c 'one {}'
t1=$(date +%s%N)
(cd "$work" && "$golem" batch --jobs "$jobs" small >/dev/null 2>&1)
t2=$(date +%s%N)
xargs_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", (b-a)/1e9}')
golem_s=$(awk -v a="$t1" -v b="$t2" 'BEGIN{printf "%.1f", (b-a)/1e9}')
echo "docs: $docs, jobs: $jobs"
echo "xargs -P $jobs docker run --rm : ${xargs_s} s"
echo "golem-orch batch --jobs $jobs  : ${golem_s} s"
awk -v g="$golem_s" -v x="$xargs_s" 'BEGIN{printf "ratio golem/xargs: %.2f\n", g/x}'

rm -rf "$GOLEM_HOME"
peak=$( { cd "$work" && /usr/bin/time -f '%M' "$golem" batch --jobs 16 docs >/dev/null 2>"$work/err"; } ; tail -1 "$work/err")
echo "peak orchestrator RSS, $memdocs docs at --jobs 16: $((peak / 1024)) MiB"
