# shellcheck shell=bash
# grid.sh — sourced by .bench/run.sh: the same-run comparison grids.
#
#   line  PUB DURABLE over mmmq's line protocol, for each index-sync mode
#         (BENCH_INDEX_SYNC) and, with BENCH_LINE_BASE=<mmmq binary>, that
#         baseline build as one more system (its own broker, the first
#         index-sync mode, the same load generator: before and after a
#         change in one run), beside Redis XADD (appendfsync always), at
#         BENCH_LINE_C connections x BENCH_DEPTHS pipelining depths; all
#         driven by `mmmq bench` (-mode line / -mode redis: one client loop,
#         same connections, same depth, same message).
#   http  POST /messages?ack=durable, one message per request, for each
#         index-sync mode, beside the plain handler (the HTTP ceiling: a
#         net/http handler that only answers, in its own process), at
#         BENCH_HTTP_C connections; driven by wrk, else by `mmmq bench`.
#
# Each cell is run BENCH_ROUNDS times, interleaved: round r runs every
# system of the cell one after the other (mmmq commit, mmmq lazy, Redis;
# or ceiling, commit, lazy) before round r+1, so slow phases of the shared
# machine hit all alike; the table shows the middle round by msgs/s (the
# median) and lists all rounds. Every run has a fresh broker or Redis on a
# new data directory. For mmmq runs /metrics is read before and after:
# fsyncs (mmmq_fsyncs_total; by file="segment"/"index" when labelled) and
# group commits (mmmq_group_commit_entries _count and _sum).
#
# Expects from run.sh: TMP, ROOT, MMMQ, SIZE, ROUNDS_FILE, say, row,
# start_broker, stop_broker, free_port, holds_port, peers.sh.
# shellcheck disable=SC2034 # REDIS_VERSION, PLAIN_* are read by run.sh

# index-sync: the key mmmq.broker.storage.index-sync (env
# MMMQ_BROKER_STORAGE_INDEX_SYNC). HAS_INDEX_SYNC is 1 when this build knows
# it. Without it commit is the only behaviour: commit runs get no
# assignment, any other mode still does, so that broker refuses to start
# and the run fails at once instead of measuring commit under another name.
index_sync_env() { # MODE: sets SYNC_ENV (array of VAR=VALUE)
	SYNC_ENV=()
	if [ "$1" != commit ] || [ "$HAS_INDEX_SYNC" = 1 ]; then
		SYNC_ENV=("MMMQ_BROKER_STORAGE_INDEX_SYNC=$1")
	fi
}

# sync_env_of SYSTEM: SYNC_ENV for an mmmq system of the grids: an
# index-sync mode, or noprealloc (BENCH_PREALLOC_OFF=1: the first mode with
# mmmq.broker.storage.preallocate 0).
sync_env_of() {
	if [ "$1" = noprealloc ]; then
		index_sync_env "${INDEX_SYNC%% *}"
		SYNC_ENV+=("MMMQ_BROKER_STORAGE_PREALLOCATE=0")
	else
		index_sync_env "$1"
	fi
}

# scrape URL: the broker's write-path counters from /metrics as one JSON
# object: fsyncs (all), seg and idx (null without a file label), commits
# (group commits) and entries (entries they wrote); {} when unreadable.
scrape() {
	local text
	text=$(curl -sf --max-time 5 "$1/metrics") || {
		echo '{}'
		return
	}
	echo "$text" | awk '
		/^mmmq_fsyncs_total[ {]/ {
			v = $NF + 0; total += v
			if ($0 ~ /file="segment"/) { seg += v; lab = 1 } else if ($0 ~ /file="index"/) { idx += v; lab = 1 }
		}
		/^mmmq_group_commit_entries_count[ {]/ { commits += $NF }
		/^mmmq_group_commit_entries_sum[ {]/ { entries += $NF }
		END {
			# %.0f: mawk clamps %d at 2^31-1.
			printf "{\"fsyncs\":%.0f,\"seg\":%s,\"idx\":%s,\"commits\":%.0f,\"entries\":%.0f}\n", total,
				lab ? sprintf("%.0f", seg) : "null", lab ? sprintf("%.0f", idx) : "null", commits, entries
		}'
}

# with_fsyncs RESULT BEFORE AFTER: RESULT plus the deltas of two scrapes
# and fsyncsPerCommit, entriesPerCommit, fsyncsPerMsg (per entry written;
# the warm-up is in both counts).
with_fsyncs() {
	jq -c --argjson b "$2" --argjson a "$3" '
		def d(k): if ($a[k] != null and $b[k] != null) then $a[k] - $b[k] else null end;
		. + {fsyncs: d("fsyncs"), segFsyncs: d("seg"), idxFsyncs: d("idx"), commits: d("commits"), entries: d("entries")}
		| if (.commits // 0) > 0 then . + {fsyncsPerCommit: (.fsyncs / .commits), entriesPerCommit: (.entries / .commits),
			segPerCommit: (if .segFsyncs != null then .segFsyncs / .commits else null end),
			idxPerCommit: (if .idxFsyncs != null then .idxFsyncs / .commits else null end)} else . end
		| if (.entries // 0) > 0 then . + {fsyncsPerMsg: (.fsyncs / .entries), fsyncSource: "metrics, run.sh"} else . end' <<<"$1"
}

# record GRID SYSTEM ROUND LOADGEN RSS RESULT: appends a run to ROUNDS_FILE.
record() {
	local r=$6
	[ -n "$r" ] || r='{}'
	jq -c --arg g "$1" --arg s "$2" --argjson round "$3" --arg lg "$4" --arg rss "$5" \
		'. + {grid: $g, system: $s, round: $round, loadgen: $lg, rssMiB: $rss}' <<<"$r" >>"$ROUNDS_FILE"
}

# line_run SYSTEM C DEPTH ROUND: one run of the line grid.
line_run() {
	local sys=$1 c=$2 d=$3 round=$4 r="" before after
	say "line grid round $round: $sys c=$c depth=$d"
	if [ "$sys" = redis ]; then
		start_redis "$TMP/redis-data"
		r=$("$MMMQ" bench -mode redis -addr "127.0.0.1:$REDIS_PORT" -server-pid "$REDIS_PID" -c "$c" -depth "$d" -size "$SIZE" \
			-duration "$LDUR" -warmup "$LWARM" -progress=false -json 2>>"$TMP/bench.log") || true
		stop_redis
		rm -rf "$TMP/redis-data"
		record line redis "$round" "mmmq bench -mode redis" "$RSS_MIB" "$r"
		return
	fi
	if [ "$sys" = base ]; then
		# The baseline build (BENCH_LINE_BASE) serves, with the first
		# index-sync mode; the load generator stays this build's.
		index_sync_env "${INDEX_SYNC%% *}"
		SERVE_BIN=$LINE_BASE LINE=1 start_broker "$TMP/data-grid" "$TMP/base.yaml" "${SYNC_ENV[@]}"
	else
		sync_env_of "$sys"
		LINE=1 start_broker "$TMP/data-grid" "$TMP/base.yaml" "${SYNC_ENV[@]}"
	fi
	before=$(scrape "$BROKER_URL")
	r=$("$MMMQ" bench -mode line -addr "$LINE_ADDR" -server-pid "$BROKER_PID" -c "$c" -depth "$d" -size "$SIZE" -ack durable \
		-duration "$LDUR" -warmup "$LWARM" -progress=false -json 2>>"$TMP/bench.log") || true
	after=$(scrape "$BROKER_URL")
	stop_broker
	rm -rf "$TMP/data-grid"
	[ -n "$r" ] || r='{}'
	record line "$sys" "$round" "mmmq bench -mode line" "$RSS_MIB" "$(with_fsyncs "$r" "$before" "$after")"
}

# disk_run MODE ROUND: the data filesystem alone beside the line grid's
# 1-connection depth-1 cell: `mmmq bench -mode disk-append` (append SIZE
# bytes + fsync, one writer) or disk-overwrite (overwrite preallocated
# zeros + fdatasync), in a scratch directory under TMP (the bench's data
# filesystem), for the grid's duration: the floor a durable publish with
# one request outstanding stands on.
disk_run() {
	local mode=$1 round=$2 r
	say "line grid round $round: $mode (the data filesystem alone)"
	mkdir -p "$TMP/data-disk"
	r=$("$MMMQ" bench -mode "$mode" -dir "$TMP/data-disk" -size "$SIZE" -duration "$LDUR" -warmup "$LWARM" \
		-progress=false -json 2>>"$TMP/bench.log") || true
	rm -rf "$TMP/data-disk"
	[ -n "$r" ] || r='{}'
	record line "$mode" "$round" "mmmq bench -mode $mode" "" "$(jq -c '. + {producers: 1, depth: 1}' <<<"$r")"
}

# wrk_result WRK_JSON C PID CPU0 CPU1 MODE: the wrk line as a bench
# result: msgs/s of 2xx responses, errors (connect, read, write, timeout,
# non-2xx), latencies in ms, the server's CPU per message.
wrk_result() {
	jq -c --argjson c "$2" --arg cpu0 "$4" --arg cpu1 "$5" --arg mode "$6" --argjson size "$SIZE" '
		(.responses - .status) as $ok
		| {mode: $mode, producers: $c, ack: "DURABLE", size: $size, seconds: (.durationUs / 1e6),
		   requests: .responses, messages: $ok, errors: (.connect + .read + .write + .timeout + .status),
		   msgsPerSec: ($ok / (.durationUs / 1e6)),
		   p50Ms: (.p50Us / 1e3), p99Ms: (.p99Us / 1e3), p999Ms: (.p999Us / 1e3), maxMs: (.maxUs / 1e3)}
		| if $cpu0 != "" and $cpu1 != "" and $ok > 0 then
			. + {serverCpuUsPerMsg: (((($cpu1 | tonumber) - ($cpu0 | tonumber)) * 1e4 / $ok) * 10 | round / 10)} else . end
		| if .errors > 0 then . + {firstError: "wrk: \(.connect) connect, \(.read) read, \(.write) write, \(.timeout) timeout errors, \(.status) non-2xx"} else . end' <<<"$1"
}

# http_load URL_BASE PID C MODE: warm-up, then one measured HTTP run
# against URL_BASE with wrk when there is one, else with mmmq bench;
# prints the result line.
http_load() {
	local base=$1 pid=$2 c=$3 mode=$4 j cpu0 cpu1
	if [ -n "$WRK" ]; then
		run_wrk "$base/messages?ack=durable" "$c" "$(wrk_secs "$LWARM")" "$TMP/body.json" >/dev/null
		cpu0=$(cpu_ticks "$pid")
		j=$(run_wrk "$base/messages?ack=durable" "$c" "$(wrk_secs "$LDUR")" "$TMP/body.json")
		cpu1=$(cpu_ticks "$pid")
		[ -n "$j" ] && wrk_result "$j" "$c" "$pid" "$cpu0" "$cpu1" "$mode"
		return 0
	fi
	"$MMMQ" bench -mode "$mode" -url "$base" -server-pid "$pid" -c "$c" -size "$SIZE" -ack durable \
		-duration "$LDUR" -warmup "$LWARM" -progress=false -json 2>>"$TMP/bench.log" || true
}

# http_run SYSTEM C ROUND: one run of the http grid (SYSTEM plain: the
# plain-server started by http_grid).
http_run() {
	local sys=$1 c=$2 round=$3 r before after
	say "http grid round $round: $sys c=$c ($HTTP_LOADGEN)"
	if [ "$sys" = plain ]; then
		r=$(http_load "http://127.0.0.1:$PLAIN_PORT" "$PLAIN_PID" "$c" plain)
		record http plain "$round" "$HTTP_LOADGEN" "" "$r"
		return
	fi
	sync_env_of "$sys"
	start_broker "$TMP/data-grid" "$TMP/base.yaml" "${SYNC_ENV[@]}"
	before=$(scrape "$BROKER_URL")
	r=$(http_load "$BROKER_URL" "$BROKER_PID" "$c" publish)
	after=$(scrape "$BROKER_URL")
	stop_broker
	rm -rf "$TMP/data-grid"
	[ -n "$r" ] || r='{}'
	record http "$sys" "$round" "$HTTP_LOADGEN" "$RSS_MIB" "$(with_fsyncs "$r" "$before" "$after")"
}

# start_plain: the plain handler in its own process (PLAIN_PID, PLAIN_PORT).
start_plain() {
	local i
	PLAIN_PORT=$(free_port)
	"$MMMQ" bench -mode plain-server -listen "127.0.0.1:$PLAIN_PORT" 2>>"$TMP/bench.log" &
	PLAIN_PID=$!
	for ((i = 0; ; i++)); do
		holds_port "$PLAIN_PID" "$PLAIN_PORT" && return 0
		if ! kill -0 "$PLAIN_PID" 2>/dev/null || [ "$i" -ge 1000 ]; then
			say "plain handler server did not start; log:"
			tail -5 "$TMP/bench.log" >&2
			exit 1
		fi
		sleep 0.01
	done
}

stop_plain() {
	kill "$PLAIN_PID" 2>/dev/null || true
	wait "$PLAIN_PID" 2>/dev/null || true
	PLAIN_PID=""
}

# bench_body: the JSON message mmmq bench sends (benchContent: {"p":"..."}
# of SIZE bytes), for wrk.
bench_body() {
	awk -v n="$SIZE" -v t="mmmq-bench.wrk.0" 'BEGIN {
		a = "0123456789abcdefghijklmnopqrstuvwxyz"; p = ""
		for (i = 0; i < n - 8; i++) p = p substr(a, i % 36 + 1, 1)
		printf "{\"topic\":\"%s\",\"content\":{\"p\":\"%s\"}}", t, p }'
}

# peers: installs and checks Redis and wrk (BENCH_PEERS=0: neither); sets
# REDIS_OK, WRK, HTTP_LOADGEN and adds a "skipped" row for what is missing.
peers() {
	REDIS_OK=0
	WRK=""
	HTTP_LOADGEN="mmmq bench"
	if [ "$PEERS" != 1 ]; then
		row '{}' "Redis: skipped (BENCH_PEERS=0)" "" "" ""
		row '{}' "wrk: skipped (BENCH_PEERS=0); the HTTP grid uses mmmq bench" "" "" ""
		return
	fi
	if ensure_cmd redis-server redis-server && ensure_cmd redis-cli redis-tools; then
		REDIS_OK=1
		REDIS_VERSION=$(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')
	else
		row '{}' "Redis: skipped ($SKIP_WHY)" "" "" ""
	fi
	if ensure_cmd wrk wrk; then
		WRK=$(command -v wrk)
		HTTP_LOADGEN="wrk $({ wrk -v 2>&1 || true; } | awk 'NR == 1 {sub(/^debian\//, "", $2); print $2}')"
	else
		row '{}' "wrk: skipped ($SKIP_WHY); the HTTP grid uses mmmq bench" "" "" ""
	fi
}

# preflight: every index-sync mode must be one this build accepts
# (mmmq config check with its environment), so an unknown mode fails the
# bench before anything is measured, with the broker's reason.
preflight() {
	local s out
	for s in $INDEX_SYNC; do
		index_sync_env "$s"
		if ! out=$(env "${SYNC_ENV[@]}" "$MMMQ" config check --config "$TMP/base.yaml" 2>&1); then
			say "index-sync $s: this broker refuses it (BENCH_INDEX_SYNC=\"$INDEX_SYNC\"; set it to the modes it has):"
			echo "$out" | tail -3 >&2
			exit 1
		fi
	done
}

# grids: both grids, then one table row per cell (the median round).
grids() {
	local r c d s
	bench_body >"$TMP/body.json"
	if part line; then
		for ((r = 1; r <= ROUNDS; r++)); do
			for c in $LINE_CS; do
				for d in $DEPTHS; do
					if [ -n "$LINE_BASE" ]; then line_run base "$c" "$d" "$r"; fi
					for s in $INDEX_SYNC; do line_run "$s" "$c" "$d" "$r"; done
					if [ "$PREALLOC_OFF" = 1 ]; then line_run noprealloc "$c" "$d" "$r"; fi
					if [ "$REDIS_OK" = 1 ]; then line_run redis "$c" "$d" "$r"; fi
					if [ "$c" = 1 ] && [ "$d" = 1 ]; then
						disk_run disk-append "$r"
						disk_run disk-overwrite "$r"
					fi
				done
			done
		done
	fi
	if part http; then
		start_plain
		for ((r = 1; r <= ROUNDS; r++)); do
			for c in $HTTP_CS; do
				http_run plain "$c" "$r"
				for s in $INDEX_SYNC; do http_run "$s" "$c" "$r"; done
				if [ "$PREALLOC_OFF" = 1 ]; then http_run noprealloc "$c" "$r"; fi
			done
		done
		stop_plain
	fi
	grid_rows
}

# grid_rows: per cell the middle round by msgs/s, with every round's
# msgs/s in the note and the ratio to Redis (line) or to the ceiling
# (http) of the same connections and depth, medians both; appended to the
# results in grid order.
grid_rows() {
	[ -s "$ROUNDS_FILE" ] || return 0
	jq -c -s --argjson syncs "$(jq -nc --arg s "$INDEX_SYNC" '$s | split(" ") | map(select(. != ""))')" '
		def key: "\(.grid)/\(.producers)/\(.depth // 0)";
		def order: ({line: 0, http: 1}[.grid]) * 1e9 + (.producers // 0) * 1e5 + (.depth // 0) * 10
			+ (.system as $s | if $s == "plain" or $s == "base" then 0 elif $s == "redis" then 9
				elif $s == "noprealloc" then 8 elif $s == "disk-append" then 10 elif $s == "disk-overwrite" then 11 else 1 + ($syncs | index($s)) end);
		def ref: .system == "redis" or .system == "plain" or (.system | startswith("disk-"));
		map(select(.system != null and .grid != null))
		| group_by([.grid, .system, .producers, (.depth // 0)])
		| map((sort_by(.msgsPerSec // 0)) as $s | $s[(($s | length) - 1) / 2 | floor]
			+ {rounds: map(.msgsPerSec // 0 | round), allErrors: (map(.errors // 0) | add)})
		| (map(select(.system == "redis" or .system == "plain")) | map({key: key, value: .msgsPerSec}) | from_entries) as $ref
		| (map(select(.system == "disk-append")) | map({key: key, value: .msgsPerSec}) | from_entries) as $append
		| (map(select(.system == "disk-overwrite")) | map({key: key, value: .msgsPerSec}) | from_entries) as $overwrite
		| map(. + {ratio: (if ref or ($ref[key] // 0) == 0 then null
			else "\((.msgsPerSec / $ref[key] * 100 | round) / 100)× \(if .grid == "line" then "Redis" else "ceiling" end)" end)})
		| map(if .grid == "line" and (ref | not) and ($append[key] // 0) > 0 and ($overwrite[key] // 0) > 0 then
			. + {ratio: ([.ratio // empty, "\((.msgsPerSec / $append[key] * 100 | round) / 100)× disk append+fsync",
				"\((.msgsPerSec / $overwrite[key] * 100 | round) / 100)× disk overwrite+fdatasync"] | join(", "))} else . end)
		| sort_by(order)[]
		| . + {scenario: (if .grid == "line" then
				(if .system == "redis" then "Redis XADD, appendfsync always"
				elif .system == "disk-append" then "the data filesystem alone: append \(.size) B + fsync, one writer (no broker)"
				elif .system == "disk-overwrite" then "the data filesystem alone: overwrite \(.size) B of preallocated zeros + fdatasync, one writer (no broker)"
				elif .system == "base" then "line PUB DURABLE, baseline build (BENCH_LINE_BASE), index-sync \($syncs[0])"
				elif .system == "noprealloc" then "line PUB DURABLE, index-sync \($syncs[0]), preallocate 0 (off)"
				else "line PUB DURABLE, index-sync \(.system)" end)
			else
				(if .system == "plain" then "plain net/http handler, own process (HTTP ceiling)"
				elif .system == "noprealloc" then "HTTP POST /messages DURABLE, index-sync \($syncs[0]), preallocate 0 (off)"
				else "HTTP POST /messages DURABLE, index-sync \(.system)" end)
			end),
			note: ("median of \(.rounds | length) rounds, msgs/s: \(.rounds | map(tostring) | join(" / "))"
				+ (if .allErrors > 0 then "; errors in all rounds: \(.allErrors)" else "" end))}
	' "$ROUNDS_FILE" >>"$RESULTS"
}
