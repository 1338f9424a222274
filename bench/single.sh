#!/usr/bin/env bash
# One session, side by side in one run: `golem-orch run` against plain `docker run --rm` with the
# same hardening, mounts and worker command (the docker baseline bind-mounts its output directory
# and does no validation, staging or audit). Runs alternate so machine noise hits both equally.
# Where the engine has gVisor registered (README, "Runtimes"), the same pair also runs under
# runsc, so runc and runsc sit side by side.
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
# The pids limit golem-orch's plan sets: the policy's 64, plus gVisor's own threads under runsc
# (plan::pids_limit), without which runsc cannot start the worker.
pids() { if [ -n "${rt:-}" ] && [ "$rt" = runsc ]; then echo $((64 + 128 + 8 * $(nproc))); else echo 64; fi; }
golem_once() { (cd "$work" && "$golem" run --untrusted ${rt:+--runtime "$rt"} doc.txt >/dev/null); }
docker_once() {
  local out; out=$(mktemp -d -p "$work"); chmod 777 "$out"
  docker run --rm ${rt:+--runtime "$rt"} --network none --read-only --cap-drop ALL --security-opt no-new-privileges:true \
    --user 65534:65534 --memory 512m --memory-swap 512m --cpus 1 --pids-limit "$(pids)" \
    --tmpfs /tmp:rw,noexec,nosuid,nodev,size=64m --log-opt max-size=1m \
    --mount "type=bind,source=$work/doc.txt,target=/input/doc.txt,readonly" \
    --mount "type=bind,source=$out,target=/output" "$tag" report >/dev/null 2>&1
}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2))}'; }
runtimes=(runc)
if docker info --format '{{json .Runtimes}}' | grep -q '"runsc"'; then runtimes+=(runsc); fi
for r in "${runtimes[@]}"; do rt=$([ "$r" = runc ] || echo "$r"); golem_once; docker_once; done  # warm up
declare -A g d
for _ in $(seq "$runs"); do
  for r in "${runtimes[@]}"; do
    rt=$([ "$r" = runc ] || echo "$r")
    t=$(now); golem_once; g[$r]+=" $(( ($(now) - t) / 1000000 ))"
    t=$(now); docker_once; d[$r]+=" $(( ($(now) - t) / 1000000 ))"
  done
done
echo "runs: $runs (alternating)"
for r in "${runtimes[@]}"; do
  gm=$(median ${g[$r]}); dm=$(median ${d[$r]})
  echo "[$r] golem-orch run --untrusted   median ${gm} ms"
  echo "[$r] docker run --rm (same flags) median ${dm} ms"
  awk -v g="$gm" -v d="$dm" -v r="$r" 'BEGIN { printf "[%s] ratio golem/docker: %.2f\n", r, g/d }'
done
