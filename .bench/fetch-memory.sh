#!/usr/bin/env bash
# .bench/fetch-memory.sh BIN N — peak broker memory of N concurrent group
# fetches: 18 stored messages of ~1 MB on one topic, N groups each fetching
# max=1000 at once. Prints the broker's VmHWM before and after and the reply
# bytes received. Compare two builds:
#
#   .bench/fetch-memory.sh bin/mmmq 16
set -euo pipefail
BIN=$(realpath "$1"); N=$2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/examples/demo/ports.sh"
D=$(mktemp -d /tmp/mmmq-fetchmem.XXXXXX)
P=$(free_port)
MMMQ_SERVER_PORT=$P MMMQ_SERVER_HOST=127.0.0.1 MMMQ_BROKER_STORAGE_ROOT_DIR=$D/data MMMQ_LOGGING_LEVEL=warn \
	"$BIN" serve 2>"$D/broker.log" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$D"' EXIT
await_broker "$PID" "$P" "$D/broker.log"
python3 -c 'import json;print(json.dumps({"topic":"big","content":"x"*1000000}))' >"$D/body.json"
for _ in $(seq 18); do curl -sf -XPOST "http://127.0.0.1:$P/messages" --data-binary @"$D/body.json" -o /dev/null; done
before=$(awk '/VmHWM/{print $2}' "/proc/$PID/status")
cpids=()
for g in $(seq "$N"); do
	curl -s -XPOST "http://127.0.0.1:$P/topics/big/groups/g$g/fetch?max=1000" -o "$D/out$g" -w '%{http_code} ' &
	cpids+=($!)
done
wait "${cpids[@]}"
echo
after=$(awk '/VmHWM/{print $2}' "/proc/$PID/status")
bytes=$(cat "$D"/out* | wc -c)
echo "N=$N broker VmHWM before=$((before / 1024)) MiB after=$((after / 1024)) MiB; reply bytes=$((bytes / 1048576)) MiB"
