# shellcheck shell=bash
# cluster.sh — sourced by .bench/run.sh: part "cluster", mmmq over NATS
# JetStream beside raw JetStream, same run, same machine.
#
# It builds the nats-server go.mod pins (once, into the bench's TMP), starts
# a 3-node JetStream cluster on free loopback ports (client, route and
# monitoring port per node) with `sync_interval: always`, and ONE mmmq
# broker over it (backend jetstream, replicas 3). Then, for each C of
# BENCH_CLUSTER_C, BENCH_ROUNDS interleaved rounds of:
#   mmmq  POST /messages?ack=durable, one message per request
#         (mmmq bench -mode publish: C keep-alive HTTP connections)
#   raw   a synchronous JetStream publish of the same message JSON to an R3
#         file stream, waiting for its PubAck (mmmq bench -mode jetstream:
#         C NATS connections)
# each run on a new topic / new stream (the mmmq rows also give the
# broker's CPU per message: -server-pid). Then one run of mmmq batch publish
# (4 producers, -batch 1000: one atomic JetStream batch per request), and
# the cluster restarted without the sync_interval line (NATS's default:
# fsync every 2 minutes) for the pair at C=32 again. The table shows per
# cell the median round by msgs/s and the ratio mmmq ÷ raw of the medians.
#
# Every node must answer /healthz 200, be itself on /varz (its name, this
# cluster's name, sync_always as configured) and hold its three ports
# (holds_port: by process id); one that exits or does not become healthy
# within 60 s ends the bench at once with its log's tail.
#
# Expects from run.sh: TMP, GO, MMMQ, SIZE, ROUNDS, LDUR, LWARM, say, row,
# start_broker, stop_broker, free_port, holds_port, port_holder.
# shellcheck disable=SC2034 # NATS_VERSION is read by run.sh

CLUSTER_ROUNDS=$TMP/cluster-rounds.jsonl

# nats_build: the pinned nats-server into $TMP/nats-server (NATS, NATS_VERSION).
nats_build() {
	NATS=$TMP/nats-server
	say "cluster: building the pinned nats-server"
	"$GO" build -o "$NATS" github.com/nats-io/nats-server/v2 >&2
	NATS_VERSION=$("$NATS" --version | awk '{print $NF}')
}

# nats_conf I SYNC: node nI's configuration (SYNC "always": the
# sync_interval line; "default": none). Ports from NATS_PORTS (client,
# route, monitoring per node), store under NATS_DIR/nI.
nats_conf() {
	local i=$1 sync=$2 j p q
	read -r -a p <<<"${NATS_PORTS[i]}"
	echo "server_name: n$i"
	echo "listen: 127.0.0.1:${p[0]}"
	echo "http: 127.0.0.1:${p[2]}"
	echo "jetstream {"
	echo "  store_dir: \"$NATS_DIR/n$i\""
	if [ "$sync" = always ]; then echo "  sync_interval: always"; fi
	echo "}"
	echo "cluster {"
	echo "  name: $NATS_CLUSTER"
	echo "  listen: 127.0.0.1:${p[1]}"
	echo "  routes: ["
	for j in 1 2 3; do
		read -r -a q <<<"${NATS_PORTS[j]}"
		echo "    nats-route://127.0.0.1:${q[1]}"
	done
	echo "  ]"
	echo "}"
}

# nats_start SYNC: a fresh 3-node cluster (new ports, new store) and
# NATS_URLS; ports taken between the pick and the bind are retried twice.
nats_start() {
	local try
	for try in 1 2 3; do
		if nats_start_once "$1" "$try"; then
			return 0
		fi
		say "cluster: a NATS port was taken, retrying on others"
	done
	exit 1
}

nats_start_once() {
	local sync=$1 i p taken _
	NATS_DIR=$TMP/nats-$sync-$2
	NATS_CLUSTER=bench-$sync-$2
	NATS_PORTS=("")
	NATS_URLS=""
	taken=" "
	for i in 1 2 3; do
		NATS_PORTS[i]=""
		for _ in 1 2 3; do
			p=$(free_port)
			while [[ $taken == *" $p "* ]]; do p=$(free_port); done
			taken+="$p "
			NATS_PORTS[i]+="${NATS_PORTS[i]:+ }$p"
		done
		NATS_URLS+="${NATS_URLS:+,}nats://127.0.0.1:${NATS_PORTS[i]%% *}"
	done
	mkdir -p "$NATS_DIR"
	NATS_PIDS=()
	for i in 1 2 3; do
		nats_conf "$i" "$sync" >"$NATS_DIR/n$i.conf"
		"$NATS" -c "$NATS_DIR/n$i.conf" >>"$NATS_DIR/n$i.log" 2>&1 &
		NATS_PIDS[i]=$!
	done
	for i in 1 2 3; do
		nats_await "$i" "$sync" || return 1
	done
}

# nats_await I SYNC: node nI healthy and itself within 60 s; 1 when it
# exited because a port was taken (the caller retries), else the bench
# ends here.
nats_await() {
	local i=$1 sync=$2 n p v want_sync=false
	read -r -a p <<<"${NATS_PORTS[i]}"
	for ((n = 0; n < 600; n++)); do
		if ! kill -0 "${NATS_PIDS[i]}" 2>/dev/null; then
			wait "${NATS_PIDS[i]}" 2>/dev/null || true
			NATS_PIDS[i]=""
			nats_stop
			if grep -q 'address already in use' "$NATS_DIR/n$i.log"; then return 1; fi
			nats_fail "$i" "exited at startup"
		fi
		curl -sf -o /dev/null --max-time 1 "http://127.0.0.1:${p[2]}/healthz" && break
		sleep 0.1
	done
	((n < 600)) || nats_fail "$i" "not healthy (/healthz) within 60 s"
	for n in "${p[@]}"; do
		holds_port "${NATS_PIDS[i]}" "$n" || nats_fail "$i" "does not hold its port $n (held by $(port_holder "$n" || echo nobody))"
	done
	[ "$sync" = always ] && want_sync=true
	v=$(curl -sf --max-time 2 "http://127.0.0.1:${p[2]}/varz" |
		jq -r '"\(.server_name) \(.cluster.name) \(.jetstream.config.sync_always // false)"') || v="no /varz"
	[ "$v" = "n$i $NATS_CLUSTER $want_sync" ] ||
		nats_fail "$i" "answers as \"$v\" on /varz, want \"n$i $NATS_CLUSTER $want_sync\" (name, cluster, sync_always)"
}

# nats_fail I WHY: ends the bench with node nI's log tail.
nats_fail() {
	say "cluster: NATS node n$1 (pid ${NATS_PIDS[$1]:-gone}) $2; last lines of its log:"
	tail -n 20 "$NATS_DIR/n$1.log" >&2 || true
	nats_stop
	exit 1
}

# nats_stop: SIGTERM to every node started, then wait for each (SIGKILL
# after 15 s).
nats_stop() {
	local p n
	for p in "${NATS_PIDS[@]}"; do
		if [ -n "$p" ]; then kill -TERM "$p" 2>/dev/null || true; fi
	done
	for p in "${NATS_PIDS[@]}"; do
		[ -n "$p" ] || continue
		for ((n = 0; n < 150; n++)); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	NATS_PIDS=()
}

# cluster_broker: one mmmq broker over the running cluster (BROKER_URL).
cluster_broker() {
	cat >"$NATS_DIR/mmmq.yaml" <<EOF
logging:
  level: warn
mmmq:
  broker:
    storage:
      backend: jetstream
  jetstream:
    servers: "$NATS_URLS"
    replicas: 3
EOF
	start_broker "$NATS_DIR/mmmq-data" "$NATS_DIR/mmmq.yaml"
}

# cluster_run SYSTEM C ROUND SYNC: one measured run, recorded in
# CLUSTER_ROUNDS (SYSTEM mmmq, raw or batch).
cluster_run() {
	local sys=$1 c=$2 round=$3 sync=$4 r="" lg
	say "cluster round $round ($sync): $sys c=$c"
	case $sys in
	mmmq)
		lg="mmmq bench -mode publish"
		r=$("$MMMQ" bench -url "$BROKER_URL" -server-pid "$BROKER_PID" -c "$c" -size "$SIZE" -ack durable \
			-duration "$LDUR" -warmup "$LWARM" -progress=false -json 2>>"$TMP/bench.log") || true
		;;
	batch)
		lg="mmmq bench -batch 1000"
		r=$("$MMMQ" bench -url "$BROKER_URL" -server-pid "$BROKER_PID" -c "$c" -batch 1000 -size "$SIZE" -ack durable \
			-duration "$LDUR" -warmup "$LWARM" -progress=false -json 2>>"$TMP/bench.log") || true
		;;
	raw)
		lg="mmmq bench -mode jetstream"
		r=$("$MMMQ" bench -mode jetstream -addr "$NATS_URLS" -js-replicas 3 -c "$c" -size "$SIZE" \
			-duration "$LDUR" -warmup "$LWARM" -progress=false -json 2>>"$TMP/bench.log") || true
		;;
	esac
	[ -n "$r" ] || r='{}'
	# The broker's own fsync count says nothing here (the messages are
	# written by the NATS nodes): dropped.
	jq -c --arg s "$sys" --arg sync "$sync" --argjson round "$round" --argjson c "$c" --arg lg "$lg" \
		'del(.fsyncsPerMsg, .fsyncSource) + {system: $s, sync: $sync, round: $round, producers: $c, loadgen: $lg}' <<<"$r" >>"$CLUSTER_ROUNDS"
}

# cluster_part: the whole part; the rows go to the results.
cluster_part() {
	local r c
	: >"$CLUSTER_ROUNDS"
	nats_build
	nats_start always
	say "cluster: NATS $NATS_VERSION up ($NATS_URLS), sync_interval always"
	cluster_broker
	for ((r = 1; r <= ROUNDS; r++)); do
		for c in $CLUSTER_CS; do
			cluster_run mmmq "$c" "$r" always
			cluster_run raw "$c" "$r" always
		done
	done
	cluster_run batch 4 1 always
	stop_broker
	nats_stop
	nats_start default
	say "cluster: NATS restarted with the default sync_interval ($NATS_URLS)"
	cluster_broker
	for ((r = 1; r <= ROUNDS; r++)); do
		cluster_run mmmq 32 "$r" default
		cluster_run raw 32 "$r" default
	done
	stop_broker
	nats_stop
	cluster_rows
}

# cluster_rows: per (sync, system, C) the middle round by msgs/s, all
# rounds in the note; the mmmq rows get the ratio to the raw row of the
# same sync and C (medians both) and the raw p50.
cluster_rows() {
	jq -c -s --arg v "$NATS_VERSION" '
		def key: "\(.sync)/\(.producers)";
		group_by([.sync, .system, .producers])
		| map((sort_by(.msgsPerSec // 0)) as $s | $s[(($s | length) - 1) / 2 | floor]
			+ {rounds: map(.msgsPerSec // 0 | round), allErrors: (map(.errors // 0) | add)})
		| (map(select(.system == "raw")) | map({key: key, value: .}) | from_entries) as $raw
		| map(. + (if .system != "raw" and .system != "batch" and ($raw[key].msgsPerSec // 0) > 0 then
			{ratio: "\((.msgsPerSec / $raw[key].msgsPerSec * 100 | round) / 100)× raw JetStream",
			 rawP50: $raw[key].p50Ms} else {} end))
		| sort_by([(if .sync == "always" then 0 else 1 end), (if .system == "batch" then 1 else 0 end), .producers,
			(if .system == "raw" then 1 else 0 end)])[]
		| ("NATS \($v), 3 nodes, R3 file stream, sync_interval \(if .sync == "always" then "always" else "default (2m)" end)") as $where
		| . + {scenario: (if .system == "raw" then "raw JetStream sync publish (PubAck awaited); \($where)"
				elif .system == "batch" then "mmmq HTTP batch publish DURABLE, B=1000, over JetStream; \($where)"
				else "mmmq HTTP POST /messages DURABLE over JetStream; \($where)" end),
			note: ("median of \(.rounds | length) rounds, msgs/s: \(.rounds | map(tostring) | join(" / "))"
				+ (if .rawP50 then "; p50 ms mmmq / raw: \(.p50Ms) / \(.rawP50)" else "" end)
				+ (if .allErrors > 0 then "; errors in all rounds: \(.allErrors)" else "" end))}
	' "$CLUSTER_ROUNDS" >>"$RESULTS"
}
