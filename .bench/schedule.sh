#!/usr/bin/env bash
# .bench/schedule.sh [BIN] — the scheduled-message goal: 100,000 messages
# scheduled ("deliverAt") over the next minute on one topic of a fresh
# broker (free loopback port, checked by pid, new data dir, logging at
# warn). Prints the broker's VmRSS/VmHWM before and after, the schedule
# throughput, and the lateness of each message from its deliverAt as a
# consumer (exclusive group fetch, long poll) sees it: p50, p99, max, and
# how many were early (the run fails on any). Knobs: SCHED_N (100000),
# SCHED_OVER (1m), SCHED_C (32 producers), SCHED_LEAD (20s: the first due
# time after the start, room for the schedules).
#
#   make build && .bench/schedule.sh bin/mmmq
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(realpath "${1:-$ROOT/bin/mmmq}")
source "$ROOT/examples/demo/ports.sh"
D=$(mktemp -d "${BENCH_TMP:-/tmp}/mmmq-schedule.XXXXXX")
P=$(free_port)
MMMQ_SERVER_PORT=$P MMMQ_SERVER_HOST=127.0.0.1 MMMQ_BROKER_STORAGE_ROOT_DIR=$D/data MMMQ_LOGGING_LEVEL=warn \
	"$BIN" serve 2>"$D/broker.log" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$D"' EXIT
await_broker "$PID" "$P" "$D/broker.log"
cd "$ROOT"
${GO:-go} run .bench/schedule.go -url "http://127.0.0.1:$P" -pid "$PID" \
	-n "${SCHED_N:-100000}" -over "${SCHED_OVER:-1m}" -c "${SCHED_C:-32}" -lead "${SCHED_LEAD:-20s}"
