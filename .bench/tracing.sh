#!/usr/bin/env bash
# .bench/tracing.sh — what tracing costs a publish (`make bench-tracing`).
#
# Builds mmmq at a base revision (TRACING_BASE, default 80ceac9: main just
# before tracing was merged, with the rest of today's publish path) in a
# temporary `git worktree` (removed at the end), and at the working tree
# (HEAD). Then TRACING_ROUNDS interleaved rounds of three systems:
#
#   base   the base build, its defaults
#   off    this build, mmmq.tracing.exporter: none (the default)
#   on     this build, exporter otlp-http at sampling ratio 1, to a sink
#          this script runs (.bench/otlpsink: answers POST /v1/traces 200
#          with an empty protobuf body, counts requests, bytes and spans)
#
# Each run is a fresh broker (new data dir, free loopback port, checked by
# pid, logging at warn) driven by this build's `mmmq bench -mode publish`
# (the same load generator for all three) with -server-pid: msgs/s, p50 and
# the server's CPU per message. The order of the three is rotated from
# round to round. For `on`, the broker's mmmq_tracing_spans_total and the
# spans the sink received (after the broker stopped and flushed) are
# compared with the messages published (mmmq_publish_duration_seconds
# count, warm-up included). Publishes carry no traceparent: the broker
# starts every trace.
#
# Then the in-process Go benchmarks: BenchmarkPublishHandler/producers=8
# (DURABLE) of the base and of this build, alternately (one test binary per
# tree, -count 1 each, TRACING_GO_COUNT times), allocs/op side by side;
# BenchmarkPublishTracing of this build; TestPublishAllocsTracingOff's
# figures.
#
# Prints one markdown table (stdout); progress goes to stderr. Figures
# only: nothing here fails on a number.
#
# Knobs (environment):
#   TRACING_BASE=80ceac9     base revision (any git rev)
#   TRACING_ROUNDS=5         interleaved rounds
#   TRACING_ACKS="durable written"  ack levels (each a row per system)
#   TRACING_C=8              producers (keep-alive connections)
#   TRACING_DURATION=5s, TRACING_WARMUP=1s  per run
#   TRACING_GO_COUNT=3       runs of each Go benchmark
#   BENCH_TMP=/tmp           where the temporary directory goes
#   BENCH_KEEP=1             keep it (logs, results.jsonl)
#
# Requirements: bash, git, curl, jq, awk; Linux (/proc).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
GO=${GO:-go}
BASE_REV=${TRACING_BASE:-80ceac9}
ROUNDS=${TRACING_ROUNDS:-5}
ACKS=${TRACING_ACKS:-"durable written"}
C=${TRACING_C:-8}
DUR=${TRACING_DURATION:-5s}
WARM=${TRACING_WARMUP:-1s}
GOCOUNT=${TRACING_GO_COUNT:-3}
case $ROUNDS in '' | *[!0-9]* | 0) echo "tracing: TRACING_ROUNDS=$ROUNDS: want a number >= 1" >&2; exit 2 ;; esac
case $GOCOUNT in '' | *[!0-9]* | 0) echo "tracing: TRACING_GO_COUNT=$GOCOUNT: want a number >= 1" >&2; exit 2 ;; esac
case $C in '' | *[!0-9]* | 0) echo "tracing: TRACING_C=$C: want a number >= 1" >&2; exit 2 ;; esac
for a in $ACKS; do
	case $a in accepted | written | durable) ;; *) echo "tracing: TRACING_ACKS: '$a' is not accepted, written or durable" >&2; exit 2 ;; esac
done
for tool in git curl jq awk; do
	command -v "$tool" >/dev/null || { echo "tracing: $tool is required" >&2; exit 1; }
done
BASE_FULL=$(git rev-parse --verify --quiet "$BASE_REV^{commit}") || { echo "tracing: TRACING_BASE=$BASE_REV: not a commit" >&2; exit 2; }

say() { echo "tracing: $*" >&2; }
source "$ROOT/examples/demo/ports.sh"

START_ALL=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/mmmq-tracing.XXXXXX")
BASE_TREE=$TMP/base-tree
RESULTS=$TMP/results.jsonl
: >"$RESULTS"
BROKER_PID=""
SINK_PID=""
cleanup() {
	if [ -n "$BROKER_PID" ]; then
		kill "$BROKER_PID" 2>/dev/null || true
		wait "$BROKER_PID" 2>/dev/null || true
	fi
	if [ -n "$SINK_PID" ]; then
		kill "$SINK_PID" 2>/dev/null || true
		wait "$SINK_PID" 2>/dev/null || true
	fi
	if [ -d "$BASE_TREE" ]; then
		git -C "$ROOT" worktree remove --force "$BASE_TREE" 2>/dev/null || true
	fi
	git -C "$ROOT" worktree prune 2>/dev/null || true
	if [ "${BENCH_KEEP:-0}" = 1 ]; then
		say "kept $TMP"
	else
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

HEAD_REV=$(git rev-parse --short HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then HEAD_REV="$HEAD_REV+changes"; fi
BASE_SHORT=$(git rev-parse --short "$BASE_FULL")

# ---------------------------------------------------------------- builds
say "building the base ($BASE_SHORT) in a temporary worktree and this build ($HEAD_REV)"
git worktree add --detach --quiet "$BASE_TREE" "$BASE_FULL"
(cd "$BASE_TREE" && "$GO" build -o "$TMP/mmmq-base" ./app/mmmq && "$GO" test -c -o "$TMP/httpapi-base.test" ./modules/httpapi/) >&2
"$GO" build -o "$TMP/mmmq-head" ./app/mmmq >&2
"$GO" test -c -o "$TMP/httpapi-head.test" ./modules/httpapi/ >&2
"$GO" build -o "$TMP/otlpsink" ./.bench/otlpsink >&2
MMMQ=$TMP/mmmq-head
cat >"$TMP/base.yaml" <<'EOF'
logging:
  level: warn
EOF
# The sampling ratio in YAML: a float key cannot be set from the
# environment (MMMQ_TRACING_SAMPLING_RATIO is refused at startup).
cat >"$TMP/on.yaml" <<'EOF'
logging:
  level: warn
mmmq:
  tracing:
    sampling-ratio: 1
EOF

# ---------------------------------------------------------------- servers
# start_sink: the OTLP/HTTP sink on a free port (SINK_PID, SINK_URL); it
# must hold the port itself.
start_sink() {
	local port i
	for _ in 1 2 3; do
		port=$(free_port)
		"$TMP/otlpsink" -listen "127.0.0.1:$port" >>"$TMP/sink.log" 2>&1 &
		SINK_PID=$!
		SINK_URL=http://127.0.0.1:$port
		for ((i = 0; i < 1000; i++)); do
			if holds_port "$SINK_PID" "$port" && curl -sf "$SINK_URL/stats" >/dev/null 2>&1; then
				return 0
			fi
			if ! kill -0 "$SINK_PID" 2>/dev/null; then
				wait "$SINK_PID" 2>/dev/null || true
				SINK_PID=""
				if grep -q 'address already in use' "$TMP/sink.log"; then
					: >"$TMP/sink.log"
					continue 2
				fi
				say "the OTLP sink exited at startup; log:"
				tail -20 "$TMP/sink.log" >&2
				exit 1
			fi
			sleep 0.01
		done
		say "the OTLP sink did not answer within 10s"
		exit 1
	done
	say "no free port for the OTLP sink after 3 tries"
	exit 1
}

sink_spans() { curl -sf "$SINK_URL/stats" | jq -r .spans; }

# start_broker BIN [VAR=VALUE...]: BIN serve on a free port with a fresh
# data dir (launch_broker: BROKER_PID, BROKER_URL; ready means /readyz 200
# from a process that is BROKER_PID itself; a broker that exits at startup
# ends the script with its log's tail; a port taken between the check and
# the bind is retried).
start_broker() {
	local bin=$1
	shift
	for _ in 1 2 3; do
		rm -rf "$TMP/data"
		: >"$TMP/broker.log"
		if launch_broker "$bin" "$TMP/data" "${CFG:-$TMP/base.yaml}" "$TMP/broker.log" "$@"; then
			return 0
		fi
	done
	say "no free port for the broker after 3 tries"
	exit 1
}

stop_broker() {
	kill -TERM "$BROKER_PID"
	wait "$BROKER_PID" || true
	BROKER_PID=""
}

# metric NAME_AND_LABELS: the sum of the samples of that series in the
# scrape on stdin ("" labels: every series of the name).
metric() { awk -v m="$1" 'index($0, m) == 1 && $1 !~ /^#/ { s += $NF } END { printf "%.0f", s }'; }

# run_one SYSTEM ACK ROUND: one measured run, appended to RESULTS.
run_one() {
	local sys=$1 ack=$2 round=$3 bin r scrape s0 s1 published exported dropped failed queued
	local -a envs=()
	case $sys in
	base) bin=$TMP/mmmq-base ;;
	off)
		bin=$TMP/mmmq-head
		envs=(MMMQ_TRACING_EXPORTER=none)
		;;
	on)
		bin=$TMP/mmmq-head
		envs=(MMMQ_TRACING_EXPORTER=otlp-http "MMMQ_TRACING_ENDPOINT=$SINK_URL/v1/traces")
		;;
	esac
	say "round $round: $sys, ack $ack"
	if [ "$sys" = on ]; then
		CFG=$TMP/on.yaml start_broker "$bin" "${envs[@]}"
	else
		start_broker "$bin" "${envs[@]}"
	fi
	s0=$(sink_spans)
	if ! r=$("$MMMQ" bench -url "$BROKER_URL" -c "$C" -duration "$DUR" -warmup "$WARM" -ack "$ack" \
		-server-pid "$BROKER_PID" -progress=false -json 2>>"$TMP/bench.log") || [ -z "$r" ]; then
		say "mmmq bench failed against $sys; its log:"
		tail -20 "$TMP/bench.log" >&2
		exit 1
	fi
	scrape=$(curl -sf "$BROKER_URL/metrics" || true)
	published=$(metric 'mmmq_publish_duration_seconds_count' <<<"$scrape")
	exported=$(metric 'mmmq_tracing_spans_total{outcome="exported"}' <<<"$scrape")
	dropped=$(metric 'mmmq_tracing_spans_total{outcome="dropped"}' <<<"$scrape")
	failed=$(metric 'mmmq_tracing_spans_total{outcome="failed"}' <<<"$scrape")
	queued=$(metric 'mmmq_tracing_spans_queued' <<<"$scrape")
	stop_broker # a traced broker exports what is queued before it exits
	s1=$(sink_spans)
	jq -c --arg sys "$sys" --arg ack "$ack" --argjson round "$round" --argjson published "${published:-0}" \
		--argjson exported "${exported:-0}" --argjson dropped "${dropped:-0}" --argjson failed "${failed:-0}" \
		--argjson queued "${queued:-0}" --argjson sink $((s1 - s0)) \
		'. + {system: $sys, ackLevel: $ack, round: $round, published: $published, exported: $exported,
		      dropped: $dropped, failed: $failed, queued: $queued, sinkSpans: $sink}' <<<"$r" >>"$RESULTS"
}

start_sink
SYSTEMS=(base off on)
for ((round = 1; round <= ROUNDS; round++)); do
	for ack in $ACKS; do
		for ((k = 0; k < 3; k++)); do
			run_one "${SYSTEMS[$(((k + round - 1) % 3))]}" "$ack" "$round"
		done
	done
done

# ---------------------------------------------------------------- Go benchmarks
# gobench BIN TREE PATTERN: one run of the benchmarks PATTERN of the test
# binary BIN, from its package directory in TREE; their result lines.
gobench() {
	(cd "$2/modules/httpapi" && TMPDIR=$TMP "$1" -test.run '^$' -test.bench "$3" -test.benchmem -test.count 1) |
		grep '^Benchmark' || { say "go benchmark $3 of $1 failed"; exit 1; }
}
: >"$TMP/go-base.txt"
: >"$TMP/go-head.txt"
for ((i = 1; i <= GOCOUNT; i++)); do
	say "go benchmark PublishHandler/producers=8, base and this build, $i of $GOCOUNT"
	gobench "$TMP/httpapi-base.test" "$BASE_TREE" 'PublishHandler/producers=8$' >>"$TMP/go-base.txt"
	gobench "$TMP/httpapi-head.test" "$ROOT" 'PublishHandler/producers=8$' >>"$TMP/go-head.txt"
done
say "go benchmark PublishTracing, this build"
(cd "$ROOT/modules/httpapi" && TMPDIR=$TMP "$TMP/httpapi-head.test" -test.run '^$' -test.bench 'PublishTracing' \
	-test.benchmem -test.count "$GOCOUNT") | grep '^Benchmark' >"$TMP/go-tracing.txt" || { say "BenchmarkPublishTracing failed"; exit 1; }
ALLOC_TEST=$(cd "$ROOT/modules/httpapi" && TMPDIR=$TMP "$TMP/httpapi-head.test" -test.run '^TestPublishAllocsTracingOff$' -test.v 2>&1 |
	grep -E 'allocs per publish|^(--- |ok|FAIL)' | sed 's/^ *bench_tracing_test.go:[0-9]*: //' | paste -sd'|' - | sed 's/|/; /g') || true

# field UNIT < lines: the figure before UNIT on each benchmark line, joined by " / ".
field() { awk -v u="$1" '{ for (i = 2; i <= NF; i++) if ($i == u) { printf "%s%s", (n++ ? " / " : ""), $(i - 1) } } END { print "" }'; }

# ---------------------------------------------------------------- table
END_ALL=$(date +%s)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
echo
echo "mmmq tracing cost, $(date -u +%Y-%m-%dT%H:%MZ): base $BASE_SHORT, this build $HEAD_REV; $(nproc) CPUs, $("$GO" version | awk '{print $3}')"
echo "load average $LOAD_START at start, $LOAD_END at the end; $((END_ALL - START_ALL)) s"
echo "command: TRACING_BASE=$BASE_REV TRACING_ROUNDS=$ROUNDS TRACING_ACKS=\"$ACKS\" TRACING_C=$C TRACING_DURATION=$DUR TRACING_WARMUP=$WARM TRACING_GO_COUNT=$GOCOUNT .bench/tracing.sh"
echo "HTTP POST /messages, one 200-byte message per request, $C producers, mmmq bench (this build) -server-pid; $WARM warm-up + $DUR per run; $ROUNDS interleaved rounds (order rotated), medians; ratios divide medians of the same run; 'per-round' is the median of the ratios within each round"
echo
echo "| ack | system | msgs/s | ÷ base | server CPU µs/msg | ÷ base | per-round CPU ÷ base, median (min–max) | p50 ms | spans: published msgs / broker exported, dropped, failed / sink received | rounds: msgs/s; CPU µs/msg |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---|---|"
jq -rs '
	def med: sort | if length == 0 then null elif length % 2 == 1 then .[(length - 1) / 2] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
	def r(n): if . == null then "–" else (. * n | round) / n end;
	def f2: (. * 100 | round) as $x | "\($x / 100 | floor).\($x % 100 | tostring | if length == 1 then "0" + . else . end)";
	def comma: tostring as $s | if ($s | length) > 3 then ($s[:-3] | comma) + "," + $s[-3:] else $s end;
	. as $all
	| [$all[] | .ackLevel] | unique as $acks
	| $acks[] as $ack
	| ($all | map(select(.ackLevel == $ack))) as $rows
	| ($rows | map(select(.system == "base"))) as $base
	| ($base | map(.msgsPerSec) | med) as $bm
	| ($base | map(.serverCpuUsPerMsg) | med) as $bc
	| ("base", "off", "on") as $sys
	| ($rows | map(select(.system == $sys)) | sort_by(.round)) as $s
	| ($s | map(.msgsPerSec) | med) as $m
	| ($s | map(.serverCpuUsPerMsg) | med) as $c
	| [$s[] | . as $x | ($base[] | select(.round == $x.round) | .serverCpuUsPerMsg) as $b | $x.serverCpuUsPerMsg / $b] as $pr
	| "| \($ack) | \({base: "base", off: "HEAD, tracing off", on: "HEAD, tracing on (otlp-http, ratio 1)"}[$sys]) | \($m | round | comma) | \($m / $bm | f2)× | \($c | r(10)) | \($c / $bc | f2)× | "
	  + (if $sys == "base" then "–" else "\($pr | med | f2)× (\($pr | min | f2)–\($pr | max | f2))" end)
	  + " | \($s | map(.p50Ms) | med | r(100)) | "
	  + (if $sys == "on" then ($s | map("\(.published | comma) / \(.exported | comma), \(.dropped), \(.failed) / \(.sinkSpans | comma)") | join("; ")) else "–" end)
	  + " | \($s | map("\(.msgsPerSec | round | comma); \(.serverCpuUsPerMsg | r(10))") | join(" · ")) |"
' "$RESULTS"
echo
echo "Go benchmarks (in-process, no sockets; -benchmem; $GOCOUNT runs each, base and this build alternately):"
echo
echo "| benchmark | tree | allocs/op | B/op | msgs/s |"
echo "|---|---|---|---|---|"
echo "| PublishHandler/producers=8 (DURABLE) | base $BASE_SHORT | $(field allocs/op <"$TMP/go-base.txt") | $(field B/op <"$TMP/go-base.txt") | $(field msgs/s <"$TMP/go-base.txt") |"
echo "| PublishHandler/producers=8 (DURABLE) | this build | $(field allocs/op <"$TMP/go-head.txt") | $(field B/op <"$TMP/go-head.txt") | $(field msgs/s <"$TMP/go-head.txt") |"
for sub in tracing=off/traceparent=header tracing=off/traceparent=none tracing=on/traceparent=header tracing=on/traceparent=none; do
	grep -F "PublishTracing/$sub-" "$TMP/go-tracing.txt" >"$TMP/sub.txt" || true
	echo "| PublishTracing/$sub (8 producers, WRITTEN) | this build | $(field allocs/op <"$TMP/sub.txt") | $(field B/op <"$TMP/sub.txt") | $(field msgs/s <"$TMP/sub.txt") |"
done
echo
echo "TestPublishAllocsTracingOff (this build): ${ALLOC_TEST:-did not run}"
