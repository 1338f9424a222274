#!/usr/bin/env bash
# One session, side by side in one run: `golem-orch run` against plain `docker run --rm` with the
# same hardening, mounts and worker command (the docker baseline bind-mounts its output directory
# and does no validation, staging or audit). Runs alternate so machine noise hits both equally.
#   bench/single.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
cargo build --release -q -p golem-orch
golem=$PWD/target/release/golem-orch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'a small document\nwith two lines\n' > "$work/doc.txt"
export GOLEM_HOME=$work/home
"$golem" image build >/dev/null
tag=$("$golem" doctor --json | python3 -c 'import json,sys; print([c["detail"].split()[0] for c in json.load(sys.stdin)["checks"] if c["check"]=="image"][0])')

now() { date +%s%N; }
golem_once() { (cd "$work" && "$golem" run --untrusted doc.txt >/dev/null); }
docker_once() {
  local out; out=$(mktemp -d -p "$work"); chmod 777 "$out"
  docker run --rm --network none --read-only --cap-drop ALL --security-opt no-new-privileges:true \
    --user 65534:65534 --memory 512m --memory-swap 512m --cpus 1 --pids-limit 64 \
    --tmpfs /tmp:rw,noexec,nosuid,nodev,size=64m --log-opt max-size=1m \
    --mount "type=bind,source=$work/doc.txt,target=/input/doc.txt,readonly" \
    --mount "type=bind,source=$out,target=/output" "$tag" report >/dev/null 2>&1
}
golem_once; docker_once   # warm up
g=(); d=()
for _ in $(seq "$runs"); do
  t=$(now); golem_once; g+=($(( ($(now) - t) / 1000000 )))
  t=$(now); docker_once; d+=($(( ($(now) - t) / 1000000 )))
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2))}'; }
gm=$(median "${g[@]}"); dm=$(median "${d[@]}")
echo "runs: $runs (alternating)"
echo "golem-orch run --untrusted   median ${gm} ms"
echo "docker run --rm (same flags) median ${dm} ms"
awk -v g="$gm" -v d="$dm" 'BEGIN { printf "ratio golem/docker: %.2f\n", g/d }'
