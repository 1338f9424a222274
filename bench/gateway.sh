#!/usr/bin/env bash
# The model gateway's added latency and its throughput with 8 sessions, against the scripted
# upstream called directly, in one process (see orchestrator/examples/gateway_bench.rs).
# Exits non-zero if any request was lost or double-counted. No Docker, pulls nothing.
#   bench/gateway.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1}
cargo build --release -q --example gateway_bench -p golem-orch
for i in $(seq "$runs"); do
  echo "== run $i of $runs"
  cargo run --release -q --example gateway_bench -p golem-orch
done
