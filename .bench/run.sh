#!/usr/bin/env bash
# .bench/run.sh — what `make bench` runs. It prints ONE markdown
# table with every figure of the run, the machine, the Go version and the
# command.
#
#   make bench                       # full run, ~20 minutes (the 1M replay is 3-5 of them)
#   BENCH_QUICK=1 make bench         # shorter runs, ~5 minutes
#
# First the same-run grids (.bench/grid.sh): line-protocol PUB DURABLE of
# mmmq for each index-sync mode beside Redis XADD (appendfsync always),
# every one driven by `mmmq bench` with the same connections, pipelining
# depth and message; then HTTP single-message DURABLE publish beside the
# plain-handler ceiling, driven by wrk. Each cell is the median of
# BENCH_ROUNDS interleaved rounds. redis-server and wrk are installed from
# Debian's packages when missing (apt-get; sudo when not root); when that
# fails the table says "skipped" and why, and the HTTP grid uses mmmq bench.
# Then (part cluster, .bench/cluster.sh) mmmq over NATS JetStream: a 3-node
# JetStream cluster of the nats-server go.mod pins (built into TMP) with
# sync_interval always, on free loopback ports, and one mmmq broker over it
# (backend jetstream, replicas 3): HTTP DURABLE single-message publish
# (mmmq bench -mode publish) beside raw synchronous JetStream publish of the
# same message to an R3 stream (mmmq bench -mode jetstream), same
# producers, interleaved rounds; one mmmq batch publish row; and the pair at
# 32 producers again after restarting the cluster under NATS's default
# sync_interval (the cost of "always").
#
# Knobs (environment):
#   BENCH_QUICK=1          shorter: grid runs of 1 s at 1/32/128 connections, publish sweep
#                          of 2 s at 128 and 512 producers, replay of 50k instead of 1M
#   BENCH_PARTS="line http cluster go sweep batch deliver replay startup"
#                          the parts to run (default all, in that order)
#   BENCH_CLUSTER_C="1 8 32 128"  producers of the cluster part (quick: 8 32); its runs
#                          take BENCH_GRID_DURATION/BENCH_GRID_WARMUP and BENCH_ROUNDS
#   BENCH_INDEX_SYNC="commit lazy"  index-sync modes of the mmmq grid rows
#                          (mmmq.broker.storage.index-sync; a mode the broker does
#                          not know makes it refuse to start, and the bench fails)
#   BENCH_LINE_C="1 8 32 128"  connections of the line grid (quick: 1 32 128)
#   BENCH_PREALLOC_OFF=1   one more system in the line and HTTP grids: the first index-sync
#                          mode with mmmq.broker.storage.preallocate: 0 (preallocation off)
#   BENCH_LINE_BASE=path   an mmmq binary (say, built from main) run in the line grid as one
#                          more system, interleaved with this build and Redis: before/after
#                          in one run (BENCH_PARTS=line BENCH_DEPTHS=1 for the depth-1 rows only)
#   BENCH_DEPTHS="1 16"    pipelining depths of the line grid (requests outstanding per connection)
#   BENCH_HTTP_C="1 8 32 128"  connections of the HTTP grid (quick: 1 32 128)
#   BENCH_ROUNDS=3         interleaved rounds per grid cell (the table shows the median)
#   BENCH_GRID_DURATION=2s, BENCH_GRID_WARMUP=500ms  per grid run (quick: 1s, 300ms; wrk
#                          rounds both up to whole seconds)
#   BENCH_PEERS=0          no Redis, no wrk (the HTTP grid then uses mmmq bench); the
#                          cluster part needs no package (it builds nats-server with go)
#   BENCH_C="1 8 32"       producer counts of the publish sweep with mmmq bench, DURABLE and WRITTEN
#                          (default 1 128 512, the HTTP grid has 1-128 with wrk; quick 128 512)
#   BENCH_DURATION=4s      measured time per publish-sweep run (after BENCH_WARMUP=1s)
#   BENCH_REPLAY_COUNT=N   messages stored and replayed by a new dispatcher (default 1000000; quick 50000)
#   BENCH_REPLAY_TOPICS=K  topics they are spread over (default 1: one dispatch worker)
#   BENCH_STARTUP_BYTES=N  size of the startup data dir (default 1 GiB over 10 topics)
#   BENCH_GOBENCHTIME=1s   -benchtime of the Go benchmarks (the dispatcher ones run 1x: one op is a whole replay)
#   BENCH_INFLIGHT_COUNT=N messages per op of the dispatcher max-in-flight benchmark (default 20000; quick 5000)
#   BENCH_SCALE_FOR=20s    per point of the shared-group scale benchmark (8 points; quick 2s)
#   BENCH_RATE_FOR=30s     how long the dispatcher rate-limit benchmark pushes at 500 msgs/s (quick 10s)
#   BENCH_AUTH_BENCHTIME=2000x  -benchtime of BenchmarkAuthCPU (refused requests vs DURABLE publishes; quick 500x)
#   BENCH_TMP=/tmp         where the temporary data dirs go (same disk as production: say so)
#   BENCH_KEEP=1           keep the temporary directory (logs, results.jsonl)
#
# Every broker (and Redis server) is a fresh process on a new data dir and a
# free loopback port, logging at warn. Load comes from `bin/mmmq bench`,
# except in the HTTP grid (wrk when available); each ratio divides by a row
# of the same load generator: the HTTP ceiling is a plain handler in its own
# process (`mmmq bench -mode plain-server`), driven like the broker. Every
# row names its load generator. The Go benchmarks write under BENCH_TMP too
# (TMPDIR). Peak RSS is VmHWM of the server process just before it is
# stopped.
# Requirements: bash, curl, jq, awk (and apt-get for redis-server and wrk).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
GO=${GO:-go}
QUICK=${BENCH_QUICK:-0}
if [ "$QUICK" = 1 ]; then
	DUR=${BENCH_DURATION:-2s}
	WARM=${BENCH_WARMUP:-500ms}
	REPLAY_COUNT=${BENCH_REPLAY_COUNT:-50000}
	GOBENCHTIME=${BENCH_GOBENCHTIME:-300ms}
	DELIVER_EVERY=${BENCH_DELIVER_EVERY:-2000}
	DELIVER_INTERVAL=${BENCH_DELIVER_INTERVAL:-20000}
	BATCH_COUNT=${BENCH_BATCH_COUNT:-200000}
	INFLIGHT_COUNT=${BENCH_INFLIGHT_COUNT:-5000}
	ISOLATION_FOR=${BENCH_ISOLATION_FOR:-30s}
	SCALE_FOR=${BENCH_SCALE_FOR:-2s}
	RATE_FOR=${BENCH_RATE_FOR:-10s}
	AUTH_BENCHTIME=${BENCH_AUTH_BENCHTIME:-500x}
	LDUR=${BENCH_GRID_DURATION:-1s}
	LWARM=${BENCH_GRID_WARMUP:-300ms}
	GRID_CS="1 32 128"
	CS=${BENCH_C:-"128 512"}
	CLUSTER_CS=${BENCH_CLUSTER_C:-"8 32"}
else
	DUR=${BENCH_DURATION:-4s}
	WARM=${BENCH_WARMUP:-1s}
	REPLAY_COUNT=${BENCH_REPLAY_COUNT:-1000000}
	GOBENCHTIME=${BENCH_GOBENCHTIME:-1s}
	DELIVER_EVERY=${BENCH_DELIVER_EVERY:-5000}
	DELIVER_INTERVAL=${BENCH_DELIVER_INTERVAL:-50000}
	BATCH_COUNT=${BENCH_BATCH_COUNT:-1000000}
	INFLIGHT_COUNT=${BENCH_INFLIGHT_COUNT:-20000}
	ISOLATION_FOR=${BENCH_ISOLATION_FOR:-5m}
	SCALE_FOR=${BENCH_SCALE_FOR:-20s}
	RATE_FOR=${BENCH_RATE_FOR:-30s}
	AUTH_BENCHTIME=${BENCH_AUTH_BENCHTIME:-2000x}
	LDUR=${BENCH_GRID_DURATION:-2s}
	LWARM=${BENCH_GRID_WARMUP:-500ms}
	GRID_CS="1 8 32 128"
	CS=${BENCH_C:-"1 128 512"}
	CLUSTER_CS=${BENCH_CLUSTER_C:-"1 8 32 128"}
fi
REPLAY_TOPICS=${BENCH_REPLAY_TOPICS:-1}
STARTUP_BYTES=${BENCH_STARTUP_BYTES:-1073741824}
SIZE=200
PARTS=${BENCH_PARTS:-"line http cluster go sweep batch deliver replay startup"}
INDEX_SYNC=${BENCH_INDEX_SYNC:-"commit lazy"}
LINE_CS=${BENCH_LINE_C:-$GRID_CS}
DEPTHS=${BENCH_DEPTHS:-"1 16"}
LINE_BASE=${BENCH_LINE_BASE:-}
PREALLOC_OFF=${BENCH_PREALLOC_OFF:-0}
if [ -n "$LINE_BASE" ] && [ ! -x "$LINE_BASE" ]; then echo "bench: BENCH_LINE_BASE=$LINE_BASE: not an executable" >&2; exit 2; fi
HTTP_CS=${BENCH_HTTP_C:-$GRID_CS}
ROUNDS=${BENCH_ROUNDS:-3}
PEERS=${BENCH_PEERS:-1}
case $ROUNDS in '' | *[!0-9]* | 0) echo "bench: BENCH_ROUNDS=$ROUNDS: want a number >= 1" >&2; exit 2 ;; esac
for s in $INDEX_SYNC; do
	case $s in *[!a-z-]*) echo "bench: BENCH_INDEX_SYNC: invalid mode '$s'" >&2; exit 2 ;; esac
done
for c in $CLUSTER_CS; do
	case $c in '' | *[!0-9]* | 0) echo "bench: BENCH_CLUSTER_C: '$c' is not a producer count >= 1" >&2; exit 2 ;; esac
done

# part NAME: whether BENCH_PARTS names NAME.
part() { [[ " $PARTS " == *" $1 "* ]]; }

for tool in curl jq awk; do
	command -v "$tool" >/dev/null || { echo "bench: $tool is required" >&2; exit 1; }
done

TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/mmmq-bench.XXXXXX")
RESULTS=$TMP/results.jsonl
ROUNDS_FILE=$TMP/rounds.jsonl
: >"$RESULTS"
: >"$ROUNDS_FILE"
BROKER_PID=""
CONSUMER_PID=""
PLAIN_PID=""
REDIS_PID=""
NATS_PIDS=() # the cluster part's nats-server processes (cluster.sh)
cleanup() {
	if [ -n "$PLAIN_PID" ]; then kill "$PLAIN_PID" 2>/dev/null || true; fi
	if [ -n "$REDIS_PID" ]; then
		kill "$REDIS_PID" 2>/dev/null || true
		wait "$REDIS_PID" 2>/dev/null || true
	fi
	if [ -n "$CONSUMER_PID" ]; then kill "$CONSUMER_PID" 2>/dev/null || true; fi
	if [ -n "$BROKER_PID" ]; then
		kill "$BROKER_PID" 2>/dev/null || true
		wait "$BROKER_PID" 2>/dev/null || true
	fi
	if [ "${#NATS_PIDS[@]}" -gt 0 ]; then nats_stop; fi
	if [ "${BENCH_KEEP:-0}" = 1 ]; then
		echo "bench: kept $TMP" >&2
	else
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say() { echo "bench: $*" >&2; }
START_ALL=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

make -s build >&2
MMMQ=$ROOT/bin/mmmq

# free_port and holds_port (free ports below the ephemeral range, where the
# thousands of client sockets of the c=512 runs live).
source "$ROOT/examples/demo/ports.sh"
source "$ROOT/.bench/peers.sh"
source "$ROOT/.bench/grid.sh"
source "$ROOT/.bench/cluster.sh"

# start_broker DATA_DIR CONFIG_FILE [VAR=VALUE...]: starts bin/mmmq serve on
# a free port with the extra environment, sets BROKER_PID, BROKER_URL,
# READY_MS (exec to /readyz 200). With LINE=1 the line protocol listens on
# another free port (LINE_ADDR) and the broker must hold it too. A port
# taken between the check and the bind is retried on another port; a
# broker that exits at startup (an unknown configuration key, say) ends the
# bench at once with its log's tail.
start_broker() {
	local _
	for _ in 1 2 3; do
		if start_broker_once "$@"; then
			return 0
		fi
		say "port taken, retrying"
	done
	exit 1
}

start_broker_once() {
	local data=$1 cfg=$2 lport=""
	shift 2
	local -a extra=("$@")
	if [ "${LINE:-0}" = 1 ]; then
		lport=$(free_port)
		LINE_ADDR=127.0.0.1:$lport
		extra+=("MMMQ_LINEPROTO_ADDR=$LINE_ADDR")
	fi
	ALSO_PORTS=$lport launch_broker "${SERVE_BIN:-$MMMQ}" "$data" "$cfg" "$TMP/broker.log" "${extra[@]}"
}

# stop_broker: sets RSS_MIB (VmHWM) and stops the broker gracefully.
stop_broker() {
	RSS_MIB=$(awk '/^VmHWM:/ {printf "%.0f", $2 / 1024}' "/proc/$BROKER_PID/status" 2>/dev/null || echo "")
	kill -TERM "$BROKER_PID"
	wait "$BROKER_PID" || true
	BROKER_PID=""
}

# row JSON SCENARIO [RSS] [NOTE] [LOADGEN]: appends a bench result line to
# the results with the scenario name, the broker's peak RSS, a note and the
# load generator (default mmmq bench; none for a row without figures).
row() {
	echo "$1" | jq -c --arg s "$2" --arg rss "${3:-}" --arg note "${4:-}" --arg lg "${5-mmmq bench}" \
		'. + {scenario: $s, rssMiB: $rss, note: $note, loadgen: $lg}' >>"$RESULTS"
}

cat >"$TMP/base.yaml" <<'EOF'
logging:
  level: warn
EOF
# Whether this build has the index-sync key (see grid.sh).
HAS_INDEX_SYNC=0
if "$MMMQ" config check --config "$TMP/base.yaml" 2>/dev/null | grep -q '^mmmq\.broker\.storage\.index-sync '; then
	HAS_INDEX_SYNC=1
fi

dispatcher_yaml() { # NAME CONSUMER_PORT POLICY_YAML
	cat <<EOF
logging:
  level: warn
mmmq:
  broker:
    dispatchers:
      - name: $1
        host: http://127.0.0.1:$2
        patterns: ["bench.**"]
        commit: $3
EOF
}

# ---------------------------------------------------------------- grids
# Redis and wrk (installed when missing), then the line and HTTP grids
# (.bench/grid.sh).
if part line || part http; then
	preflight
	peers
	grids
	if [ "$HAS_INDEX_SYNC" = 0 ]; then
		say "this build has no mmmq.broker.storage.index-sync key: the commit rows ran with its only behaviour"
	fi
fi

# ---------------------------------------------------------------- cluster
# mmmq over a 3-node NATS JetStream cluster beside raw JetStream publish
# (.bench/cluster.sh).
if part cluster; then
	cluster_part
fi

# ---------------------------------------------------------------- Go benchmarks
if part go; then
	say "go benchmarks (storage, publish handler), -benchtime $GOBENCHTIME; auth CPU, -benchtime $AUTH_BENCHTIME"
	GOBENCH=$TMP/gobench.txt
	: >"$GOBENCH"
	if ls modules/storage/*_test.go >/dev/null 2>&1 && grep -qs '^func Benchmark' modules/storage/*_test.go; then
		TMPDIR=$TMP timeout 300 "$GO" test -run '^$' -bench . -benchtime "$GOBENCHTIME" ./modules/storage/ >>"$GOBENCH" 2>&1 ||
			say "storage benchmarks failed or timed out (see below)"
	else
		say "no storage benchmarks in modules/storage; skipped"
	fi
	TMPDIR=$TMP timeout 300 "$GO" test -run '^$' -bench 'PublishHandler' -benchtime "$GOBENCHTIME" ./modules/httpapi/ >>"$GOBENCH" 2>&1 ||
		say "httpapi benchmarks failed or timed out"
	# CPU per refused unauthenticated request next to a DURABLE publish: the
	# real server and auth module on loopback, one client (a few seconds).
	TMPDIR=$TMP timeout 120 "$GO" test -run '^$' -bench 'AuthCPU' -benchtime "$AUTH_BENCHTIME" ./modules/httpapi/ >>"$GOBENCH" 2>&1 ||
		say "auth CPU benchmark failed or timed out"
	# Dispatcher delivery, in-process (memTopic, httptest consumer ACKing at
	# once): replay of REPLAY_COUNT stored messages, batches of 500 or none;
	# INFLIGHT_COUNT messages committed after every message, max-in-flight 64
	# or 1. One op is a whole run, so -benchtime 1x.
	say "go benchmarks (dispatcher): replay of $REPLAY_COUNT, max-in-flight over $INFLIGHT_COUNT"
	TMPDIR=$TMP timeout 600 "$GO" test -run '^$' -bench 'Replay|MaxInFlight' -benchtime 1x ./modules/dispatcher/ \
		-dispatch.replay "$REPLAY_COUNT" -dispatch.inflight "$INFLIGHT_COUNT" >>"$GOBENCH" 2>&1 ||
		say "dispatcher benchmarks failed or timed out"
	# Ordering key's isolation: 200 messages/s over 100 keys, one of which
	# the consumer always answers 503, the consumer taking 10 ms a message,
	# max-in-flight 32, a restart halfway (ISOLATION_FOR in all).
	say "go benchmarks (dispatcher): ordering key isolation, $ISOLATION_FOR"
	TMPDIR=$TMP timeout 900 "$GO" test -run '^$' -bench 'KeyIsolation' -benchtime 1x -timeout 20m ./modules/dispatcher/ \
		-dispatch.isolation "$ISOLATION_FOR" >>"$GOBENCH" 2>&1 ||
		say "dispatcher isolation benchmark failed or timed out"
	# A shared consumer group's scale: 1, 2, 4 and 8 sessions over HTTP
	# (httptest server, real storage), each taking 2 ms per message, fetches
	# of max 1 and 10, each fetch acknowledged in one request; SCALE_FOR
	# per point, 8 points, against sessions x M / (M x 2 ms + round trip).
	say "go benchmarks (groups): shared group scale, $SCALE_FOR per point"
	TMPDIR=$TMP timeout 600 "$GO" test -run '^$' -bench 'SharedScale' -benchtime 1x -timeout 15m ./modules/groups/ \
		-groups.scale "$SCALE_FOR" >>"$GOBENCH" 2>&1 ||
		say "groups scale benchmark failed or timed out"
	# Rate limit: 500 msgs/s (burst 50) over 4 topics, max-in-flight 1, 8, 64, each for
	# RATE_FOR; err% is the rate seen by the consumer against 500 (goal ±5%).
	say "go benchmarks (dispatcher): rate limit, $RATE_FOR"
	TMPDIR=$TMP timeout 600 "$GO" test -run '^$' -bench 'RateLimit' -benchtime 1x -timeout 15m ./modules/dispatcher/ \
		-dispatch.rate-for "$RATE_FOR" >>"$GOBENCH" 2>&1 ||
		say "dispatcher rate limit benchmark failed or timed out"
	# Adaptive concurrency: a consumer serving at most 10 requests at once
	# (20 ms each, 429 above), then 40; a dispatcher with max-in-flight 64,
	# ordering key, adaptive-concurrency aimd, 6 s per capacity, then the
	# same with it off for 6 s (the control). The row's figures: busy% and
	# pushes outstanding per capacity (from 2 s into it), 429s per second
	# with and without aimd; -v keeps the 250 ms time series in the log.
	say "go benchmarks (dispatcher): adaptive concurrency, 18 s"
	TMPDIR=$TMP timeout 120 "$GO" test -run '^$' -bench 'AdaptiveConcurrency' -benchtime 1x -v ./modules/dispatcher/ >>"$GOBENCH" 2>&1 ||
		say "dispatcher adaptive concurrency benchmark failed or timed out"
	# The status page with 10,000 topics (GET /ui/ and a sorted topics
	# page; the goal is under 100 ms a page, i.e. over 10 ops/s).
	say "go benchmarks (status page, 10,000 topics)"
	TMPDIR=$TMP timeout 300 "$GO" test -run '^$' -bench 'StatusPage10kTopics' -benchtime 10x ./plugins/ui/ >>"$GOBENCH" 2>&1 ||
		say "status page benchmark failed or timed out"
	grep -E '^(FAIL|panic|---)' "$GOBENCH" >&2 || true

	# Each "BenchmarkX-N  iters  v unit  v unit ..." line becomes a row: msgs/s
	# from a reported msgs/s metric, else 1e9/ns_op (ops/s).
	awk '/^Benchmark/ {
		name = $1; sub(/-[0-9]+$/, "", name); nsop = ""; rate = ""; fs = "null"; ideal = "null"; extra = ""
		for (i = 3; i < NF; i += 2) {
			if ($(i+1) == "ns/op") nsop = $i
			else if ($(i+1) == "msgs/s") rate = $i
			else if ($(i+1) ~ /^(entries|records|ops|req)\/s$/ && rate == "") { rate = $i; extra = extra ", rate = " $(i+1) }
			else if ($(i+1) == "fsyncs/msg") fs = $i
			else if ($(i+1) == "ideal-msgs/s") { ideal = $i; extra = extra ", " $i " " $(i+1) }
			else extra = extra ", " $i " " $(i+1)
		}
		note = "ns/op " nsop extra
		if (rate == "" && nsop != "") { rate = 1e9 / nsop; note = note " (rate = ops/s from ns/op)" }
		if (rate == "") next
		printf "{\"scenario\":\"go: %s\",\"msgsPerSec\":%s,\"fsyncsPerMsg\":%s,\"idealMsgsPerSec\":%s,\"note\":\"%s\",\"gobench\":true,\"loadgen\":\"go test -bench\"}\n", name, rate, fs, ideal, note
	}' "$GOBENCH" >>"$RESULTS"
fi

# ---------------------------------------------------------------- publish sweep
if part sweep; then
	# The HTTP ceiling is a net/http handler that only answers, in its own
	# process like the broker (mmmq bench -mode plain-server), driven by the same
	# tool; that row is what the ratio divides by. The in-process row (client
	# and handler sharing one Go scheduler) is shown for reference: it is not
	# like for like with a broker in another process.
	start_plain # grid.sh
	for c in $CS; do
		say "plain handler (separate process) c=$c"
		r=$("$MMMQ" bench -mode plain -url "http://127.0.0.1:$PLAIN_PORT" -server-pid "$PLAIN_PID" -c "$c" -size $SIZE \
			-duration "$DUR" -warmup "$WARM" -json 2>>"$TMP/bench.log")
		row "$r" "plain net/http handler, own process (HTTP ceiling)"
		say "plain handler (in-process) c=$c"
		r=$("$MMMQ" bench -mode plain -c "$c" -size $SIZE -duration "$DUR" -warmup "$WARM" -json 2>>"$TMP/bench.log")
		row "$(echo "$r" | jq -c '. + {inProcess: true}')" "plain net/http handler, in the load tool's process (reference)"
		for ack in durable written; do
			say "$ack publish c=$c"
			start_broker "$TMP/data-$ack-$c" "$TMP/base.yaml"
			r=$("$MMMQ" bench -url "$BROKER_URL" -server-pid "$BROKER_PID" -c "$c" -size $SIZE -ack "$ack" \
				-duration "$DUR" -warmup "$WARM" -json 2>>"$TMP/bench.log") || true
			[ -n "$r" ] || r='{}'
			stop_broker
			row "$r" "publish ${ack^^}" "$RSS_MIB"
			rm -rf "$TMP/data-$ack-$c"
		done
	done
	kill "$PLAIN_PID" 2>/dev/null || true
	wait "$PLAIN_PID" 2>/dev/null || true
	PLAIN_PID=""
fi

# ---------------------------------------------------------------- batch publish
if part batch; then
	say "batch publish B=1000 DURABLE, $BATCH_COUNT msgs"
	start_broker "$TMP/data-batch" "$TMP/base.yaml"
	r=$("$MMMQ" bench -url "$BROKER_URL" -c 4 -batch 1000 -count "$BATCH_COUNT" -size $SIZE -json 2>>"$TMP/bench.log") || true
	[ -n "$r" ] || r='{}'
	stop_broker
	row "$r" "batch publish DURABLE, B=1000, 1 topic" "$RSS_MIB" "$BATCH_COUNT msgs"
	rm -rf "$TMP/data-batch"
fi

# ---------------------------------------------------------------- delivery
if part deliver; then
	for pol in every-message interval; do
		if [ "$pol" = every-message ]; then n=$DELIVER_EVERY; py='{policy: every-message}'; else n=$DELIVER_INTERVAL; py='{policy: interval, interval: 1s, max-count: 1000}'; fi
		say "delivery, commit $pol, $n msgs"
		cport=$(free_port)
		dispatcher_yaml "bench-$pol" "$cport" "$py" >"$TMP/deliver-$pol.yaml"
		start_broker "$TMP/data-deliver-$pol" "$TMP/deliver-$pol.yaml"
		r=$("$MMMQ" bench -mode deliver -url "$BROKER_URL" -consumer-addr "127.0.0.1:$cport" -count "$n" -c 2 -batch 1000 \
			-size $SIZE -topic-prefix bench.deliver -json 2>>"$TMP/bench.log") || true
		[ -n "$r" ] || r='{}'
		stop_broker
		row "$r" "delivery, 1 topic, commit $pol" "$RSS_MIB" "$n msgs, consumer ACKs at once"
		rm -rf "$TMP/data-deliver-$pol"
	done
fi

# ---------------------------------------------------------------- replay
if part replay; then
	say "replay: storing $REPLAY_COUNT msgs over $REPLAY_TOPICS topic(s)"
	start_broker "$TMP/data-replay" "$TMP/base.yaml"
	"$MMMQ" bench -url "$BROKER_URL" -c 4 -batch 1000 -count "$REPLAY_COUNT" -topics "$REPLAY_TOPICS" -size $SIZE \
		-topic-prefix bench.replay -json >/dev/null 2>>"$TMP/bench.log"
	stop_broker
	cport=$(free_port)
	name=bench-replay-$(date +%s)
	dispatcher_yaml "$name" "$cport" '{policy: interval, interval: 1s, max-count: 1000}' >"$TMP/replay.yaml"
	say "replay: new dispatcher $name"
	"$MMMQ" bench -mode deliver -no-publish -count "$REPLAY_COUNT" -consumer-addr "127.0.0.1:$cport" -topics "$REPLAY_TOPICS" \
		-idle-timeout 60s -json >"$TMP/replay.json" 2>>"$TMP/bench.log" &
	CONSUMER_PID=$!
	sleep 0.2
	start_broker "$TMP/data-replay" "$TMP/replay.yaml"
	wait "$CONSUMER_PID" || true
	CONSUMER_PID=""
	stop_broker
	row "$(cat "$TMP/replay.json" 2>/dev/null || echo '{}')" "replay by a new dispatcher, commit interval" "$RSS_MIB" \
		"$REPLAY_COUNT stored msgs, $REPLAY_TOPICS topic(s); broker ready in ${READY_MS} ms"
	rm -rf "$TMP/data-replay"
fi

# ---------------------------------------------------------------- startup
if part startup; then
	say "startup: generating $((STARTUP_BYTES >> 20)) MiB over 10 topics"
	gen=$("$GO" run .bench/gendata.go -dir "$TMP/data-startup" -topics 10 -bytes "$STARTUP_BYTES" -size $SIZE 2>&1 | tail -1)
	say "$gen"
	best=""
	for i in 1 2 3; do
		start_broker "$TMP/data-startup" "$TMP/base.yaml"
		ms=$READY_MS
		stop_broker
		if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
		all="${all:-}${all:+, }$ms"
	done
	topics=$(find "$TMP/data-startup" -mindepth 1 -maxdepth 1 -name 'bench.startup.*' | wc -l)
	du=$(du -sm "$TMP/data-startup" | awk '{print $1}')
	jq -nc --arg ms "$best" --arg rss "$RSS_MIB" --arg note "$du MiB, $topics topics (${gen#gendata: }); exec to /readyz 200, best of 3: $all ms; page cache warm" \
		'{scenario: "startup (recovery) to /readyz", loadgen: "curl", startupMs: ($ms|tonumber), rssMiB: $rss, note: $note}' >>"$RESULTS"
	rm -rf "$TMP/data-startup"
fi

# ---------------------------------------------------------------- table
END_ALL=$(date +%s)
echo
echo "## mmmq bench — $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo); $(uname -sr); data in $(df -P "$TMP" | awk 'NR==2 {print $1}')"
echo "load average (1/5/15 min) at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg) — the 2 cores are shared; load above ~2 means other work ran during the measurement"
echo "go: $("$GO" version | awk '{print $3, $4}'); mmmq $("$MMMQ" version | awk '{print $2}')"
echo "command: ${BENCH_QUICK:+BENCH_QUICK=$BENCH_QUICK }make bench  (.bench/run.sh; $((END_ALL - START_ALL)) s; parts: $PARTS; publish sweep runs ${WARM} warmup + ${DUR}, ${SIZE}-byte content, 1 topic)"
if part line || part http; then
	echo "grids: ${LWARM} warmup + ${LDUR} per run (wrk: $(wrk_secs "$LWARM") s + $(wrk_secs "$LDUR") s), median of $ROUNDS interleaved rounds, a fresh server and data dir per run; ${SIZE}-byte content, 1 topic; index-sync modes: $INDEX_SYNC$([ "$HAS_INDEX_SYNC" = 1 ] || echo " (this build has no index-sync key: commit is its only behaviour)")"
	echo "peers: $([ "${REDIS_OK:-0}" = 1 ] && echo "Redis ${REDIS_VERSION:-?} (redis-server --appendonly yes --appendfsync always --save \"\" --auto-aof-rewrite-percentage 0, no config file)" || echo "no Redis"); HTTP grid load generator: ${HTTP_LOADGEN:-none}"
fi
if part cluster; then
	echo "cluster: nats-server ${NATS_VERSION:-?} (go.mod's pin), 3 nodes on loopback, one R3 file stream per run; one mmmq broker (backend jetstream, replicas 3); ${LWARM} warmup + ${LDUR} per run, median of $ROUNDS interleaved rounds (mmmq, then raw, per producer count: $CLUSTER_CS); ${SIZE}-byte content, 1 topic/stream per run"
fi
echo
jq -rs '
  def f0: if . == null then "" else (. * 1 | round | tostring) end;
  def f(n): if . == null then "" else ((. * pow(10; n) | round) / pow(10; n) | tostring) end;
  (map(select(.mode == "plain" and (.inProcess | not) and .grid == null)) | map({key: (.producers|tostring), value: .msgsPerSec}) | from_entries) as $plain
  | (map(select(.gobench and (.scenario | test("JavaBaseline")))) | map({key: (.scenario | sub("^.*/"; "/")), value: .msgsPerSec}) | from_entries) as $javaBy
  | ([$javaBy[]] | max) as $javaBest
  | (map(select(.gobench)) | map({key: .scenario, value: .msgsPerSec}) | from_entries) as $go
  | "| scenario | load generator | conns | depth | msgs/s | p50 ms | p99 ms | p999 ms | errors | ratio | fsyncs/msg | fsyncs/commit | entries/commit | server CPU µs/msg | server peak RSS MiB | notes |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    (.[] |
      ((.msgsPerSec // null) | if . == null then "" else (f0) end) as $rate
      | (if .ratio then .ratio
         elif .mode == "publish" and .grid == null and ($plain[.producers|tostring] // 0) > 0 then
            ((.msgsPerSec / $plain[.producers|tostring]) | f(2)) + "× plain"
         elif .gobench and ($javaBest // 0) > 0 and (.scenario | test("BenchmarkAppend/")) then
            (.scenario | sub("^.*/"; "/")) as $k
            | if ($javaBy[$k] // 0) > 0 then ((.msgsPerSec / $javaBy[$k]) | f(1)) + "× Java design (same appenders)"
              else ((.msgsPerSec / $javaBest) | f(1)) + "× best Java design" end
         elif .gobench and .scenario == "go: BenchmarkReplay/batch=500" and ($go["go: BenchmarkReplay/batch=off"] // 0) > 0 then
            ((.msgsPerSec / $go["go: BenchmarkReplay/batch=off"]) | f(1)) + "× no batch"
         elif .gobench and .scenario == "go: BenchmarkMaxInFlight/max-in-flight=64" and ($go["go: BenchmarkMaxInFlight/max-in-flight=1"] // 0) > 0 then
            ((.msgsPerSec / $go["go: BenchmarkMaxInFlight/max-in-flight=1"]) | f(1)) + "× max-in-flight 1"
         elif .gobench and (.idealMsgsPerSec // 0) > 0 then
            ((.msgsPerSec / .idealMsgsPerSec) | f(2)) + "× ideal"
         else "" end) as $ratio
      | (if .fsyncsPerCommit == null then ""
         else (.fsyncsPerCommit | f(2)) + (if .segPerCommit != null then " (segment \(.segPerCommit | f(2)), index \(.idxPerCommit | f(3)))" else "" end) end) as $fpc
      | ((if .mode == "deliver" then
            "delivered \(.delivered // 0), dup \(.duplicates // 0), order violations \(.orderViolations // 0), \(.deliverSeconds // 0 | f(2)) s"
            + (if (.publishMsgsPerSec // 0) > 0 then ", published at \(.publishMsgsPerSec | f0)/s" else "" end)
            + (if .firstError then ", error: \(.firstError)" else "" end) + "; "
         elif .firstError and .firstError != "" then "first error: \(.firstError); " else "" end)
        + (if .serverReadCallsPerMsg != null then "server system calls per msg: \(.serverReadCallsPerMsg | f(2)) read, \(.serverWriteCallsPerMsg | f(2)) write; " else "" end)) as $d
      | "| \(.scenario) | \(.loadgen // "") | \(.producers // "" | if . == 0 then "" else tostring end) | \(.depth // "") | \(if .startupMs then "\(.startupMs) ms" else $rate end) | \(if .mode == "deliver" then "" else (.p50Ms | f(3)) end) | \(if .mode == "deliver" then "" else (.p99Ms | f(3)) end) | \(if .mode == "deliver" then "" else (.p999Ms | f(3)) end) | \(.errors // "") | \($ratio) | \(.fsyncsPerMsg | f(4)) | \($fpc) | \(.entriesPerCommit | f(1)) | \(.serverCpuUsPerMsg | f(1)) | \(.rssMiB // "") | \($d)\(.note // "") |")
' "$RESULTS"
echo
if grep -q '"mode":"publish"' "$RESULTS" && ! grep '"mode":"publish"' "$RESULTS" | grep -q fsyncsPerMsg; then
	echo "fsyncs/msg for broker runs: the broker exposes no fsync count (no \"fsyncs\" in GET /topics, no fsync counter in /metrics); the go: rows count them in-process."
fi
