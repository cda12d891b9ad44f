#!/usr/bin/env bash
# .bench/many-topics.sh BIN [TOPICS] [FD_LIMIT] — the broker under a low
# open-file limit with many topics: starts BIN with RLIMIT_NOFILE lowered to
# FD_LIMIT (default 1024), publishes one message to each of TOPICS topics
# (default 10000) in batches of 500, restarts it, publishes a second message
# to each, and prints the seconds taken, the peak number of open descriptors
# (sampled every 20 ms) and the segment cache's metrics. Fails when a batch
# is refused or the broker does not come up.
#
#   .bench/many-topics.sh bin/mmmq 10000 1024
set -euo pipefail
BIN=$(realpath "$1"); TOPICS=${2:-10000}; LIMIT=${3:-1024}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/examples/demo/ports.sh"
D=$(mktemp -d /tmp/mmmq-manytopics.XXXXXX)
PID=""
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT

start() { # starts the broker on a free port under the lowered limit
	P=$(free_port)
	(ulimit -Sn "$LIMIT" && ulimit -Hn "$LIMIT" && exec env MMMQ_SERVER_PORT="$P" MMMQ_SERVER_HOST=127.0.0.1 \
		MMMQ_BROKER_STORAGE_ROOT_DIR="$D/data" MMMQ_LOGGING_LEVEL=warn "$BIN" serve) 2>>"$D/broker.log" &
	PID=$!
	local t0=$SECONDS
	for _ in $(seq 600); do
		holds_port "$PID" "$P" && curl -sf "http://127.0.0.1:$P/readyz" >/dev/null && break
		kill -0 "$PID" 2>/dev/null || { echo "broker did not start:"; cat "$D/broker.log"; exit 1; }
		sleep 0.05
	done
	holds_port "$PID" "$P" || { echo "broker does not hold port $P"; exit 1; }
	echo "ready in $((SECONDS - t0))s holding $(ls /proc/$PID/fd | wc -l) descriptors (limit $LIMIT)"
}

round() { # one message to every topic; prints time and peak descriptors
	local peakf="$D/peak" t0
	echo 0 >"$peakf"
	(peak=0; while kill -0 "$PID" 2>/dev/null; do
		n=$(ls "/proc/$PID/fd" 2>/dev/null | wc -l)
		[ "$n" -gt "$peak" ] && peak=$n && echo "$peak" >"$peakf"
		sleep 0.02
	done) &
	local sampler=$!
	t0=$(date +%s.%N)
	python3 - "$P" "$TOPICS" <<'PY'
import json, sys, urllib.request, urllib.error
port, topics = sys.argv[1], int(sys.argv[2])
for start in range(0, topics, 500):
    msgs = [{"topic": "many.t%05d" % i, "content": {"n": i}} for i in range(start, min(start + 500, topics))]
    req = urllib.request.Request("http://127.0.0.1:%s/messages/batch" % port, data=json.dumps(msgs).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req).read()
    except urllib.error.HTTPError as e:
        sys.exit("batch at topic %d refused: HTTP %d %s" % (start, e.code, e.read()[:300]))
PY
	kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
	printf '%s: %d topics in %.1fs, peak %s descriptors\n' "$1" "$TOPICS" "$(echo "$(date +%s.%N) - $t0" | bc)" "$(cat "$peakf")"
}

start
round "first message (creates the topics)"
kill "$PID"; wait "$PID" 2>/dev/null || true
start
round "second message (existing topics)"
curl -sf "http://127.0.0.1:$P/metrics" | grep '^mmmq_segment_cache'
