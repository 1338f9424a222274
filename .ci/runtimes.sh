#!/usr/bin/env bash
# Prepares the stories that also run under gVisor and through Podman: installs podman from
# Debian when missing (the tests start their own private service), and registers gVisor (runsc)
# with the Docker Engine: installs runsc when missing, merges it into /etc/docker/daemon.json
# (every other key kept) and reloads the engine with SIGHUP. Idempotent. Needs root (or sudo)
# and a local dockerd.
set -euo pipefail
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
if ! command -v podman >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y podman >/dev/null 2>&1 \
    || { $sudo apt-get update >/dev/null && $sudo apt-get install -y podman >/dev/null; }
fi
registered() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }
registered && exit 0
if ! command -v runsc >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y --no-install-recommends runsc >/dev/null 2>&1 \
    || { $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends runsc >/dev/null; }
fi
# --network=none: runsc refuses to start a sandbox in the host's network namespace otherwise
# (golem-orch's containers have no network anyway); ptrace is the platform that works nested.
$sudo /usr/bin/python3 - "$(command -v runsc)" <<'PY'
import json, os, sys
path = "/etc/docker/daemon.json"
config = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
config.setdefault("runtimes", {})["runsc"] = {
    "path": sys.argv[1], "runtimeArgs": ["--network=none", "--platform=ptrace"]}
tmp = path + ".golem-tmp"
with open(tmp, "w") as f:
    json.dump(config, f, indent=2)
os.replace(tmp, path)
PY
pid=$(pidof dockerd) || { echo ".ci/runtimes.sh: no local dockerd to reload" >&2; exit 1; }
$sudo kill -HUP "$pid"
for _ in $(seq 50); do registered && exit 0; sleep 0.2; done
echo ".ci/runtimes.sh: runsc did not appear in the engine's runtimes" >&2
exit 1
