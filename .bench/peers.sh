# shellcheck shell=bash
# peers.sh — sourced by .bench/run.sh: the other programs of the run, each
# installed from Debian's packages when missing and started by the bench on
# a free loopback port:
#
#   redis-server  Redis with --appendonly yes --appendfsync always, a fresh
#                 server and directory for every run, no configuration file
#   wrk           the HTTP load generator of the HTTP publish rows
#                 (.bench/wrk-post.lua POSTs the same message as mmmq bench)
#
# Expects from run.sh: TMP, ROOT, say, free_port (examples/demo/ports.sh).
# shellcheck disable=SC2034 # SKIP_WHY, RSS_MIB, REDIS_* are read by run.sh

# ensure_cmd CMD PACKAGE: succeeds when CMD is on PATH, installing PACKAGE
# with apt-get (through sudo when not root) if it is missing; else sets
# SKIP_WHY to the reason and fails.
ensure_cmd() {
	local cmd=$1 pkg=$2
	local -a sudo=()
	SKIP_WHY=""
	command -v "$cmd" >/dev/null && return 0
	if ! command -v apt-get >/dev/null; then
		SKIP_WHY="$cmd is not installed and there is no apt-get"
		return 1
	fi
	if [ "$(id -u)" != 0 ]; then
		if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
			sudo=(sudo -n)
		else
			SKIP_WHY="$cmd is not installed; not root and no password-less sudo for apt-get"
			return 1
		fi
	fi
	say "$cmd missing: apt-get install -y $pkg"
	if ! timeout 300 "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "$pkg" >>"$TMP/apt.log" 2>&1; then
		# The package lists may be missing or old: update them once.
		timeout 300 "${sudo[@]}" apt-get update >>"$TMP/apt.log" 2>&1 || true
		if ! timeout 300 "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "$pkg" >>"$TMP/apt.log" 2>&1; then
			SKIP_WHY="apt-get install -y $pkg failed: $(tail -1 "$TMP/apt.log")"
			return 1
		fi
	fi
	if ! command -v "$cmd" >/dev/null; then
		SKIP_WHY="package $pkg installed, but no $cmd on PATH"
		return 1
	fi
}

# ---------------------------------------------------------------- Redis
REDIS_PID=""
REDIS_PORT=""

# redis_cli ARGS...: redis-cli against our server, one attempt, 2 s at most.
redis_cli() {
	timeout 2 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@" 2>/dev/null
}

# start_redis DIR: starts redis-server on a free port with DIR (new, empty)
# as its data directory, appendonly yes / appendfsync always, no RDB
# snapshots, no automatic AOF rewrite (each run has a fresh server; mmmq
# compacts nothing either) and no configuration file. Sets REDIS_PID and
# REDIS_PORT; waits until PING is answered by this process (INFO server
# process_id), and exits the bench at once with the log's tail when the
# server did not start.
start_redis() {
	local dir=$1 i pid
	rm -rf "$dir"
	mkdir -p "$dir"
	REDIS_PORT=$(free_port)
	redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$dir" \
		--appendonly yes --appendfsync always --save "" --auto-aof-rewrite-percentage 0 \
		--daemonize no --logfile "$TMP/redis.log" --loglevel warning &
	REDIS_PID=$!
	for ((i = 0; i < 1000; i++)); do
		if [ "$(redis_cli ping)" = PONG ]; then
			pid=$(redis_cli info server | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}')
			if [ "$pid" = "$REDIS_PID" ]; then
				return 0
			fi
			say "the Redis answering on port $REDIS_PORT is process ${pid:-?}, not ours ($REDIS_PID)"
			exit 1
		fi
		if ! kill -0 "$REDIS_PID" 2>/dev/null; then
			wait "$REDIS_PID" 2>/dev/null || true
			REDIS_PID=""
			say "redis-server exited at startup; log:"
			tail -20 "$TMP/redis.log" >&2
			exit 1
		fi
		sleep 0.01
	done
	say "redis-server not answering PING after 10 s; log:"
	tail -20 "$TMP/redis.log" >&2
	exit 1
}

# stop_redis: sets RSS_MIB (VmHWM) and stops Redis (SIGTERM: a clean
# shutdown; with --save "" it writes no snapshot).
stop_redis() {
	RSS_MIB=$(awk '/^VmHWM:/ {printf "%.0f", $2 / 1024}' "/proc/$REDIS_PID/status" 2>/dev/null || echo "")
	kill -TERM "$REDIS_PID" 2>/dev/null || true
	wait "$REDIS_PID" 2>/dev/null || true
	REDIS_PID=""
}

# ---------------------------------------------------------------- wrk
# wrk_secs DURATION: whole seconds for wrk (it takes no fractions), at
# least 1: 500ms -> 1, 2s -> 2, 1m -> 60.
wrk_secs() {
	awk -v d="$1" 'BEGIN {
		n = d + 0; u = d; sub(/^[0-9.]+/, "", u)
		if (u == "ms") n /= 1000; else if (u == "m") n *= 60; else if (u == "h") n *= 3600
		n = int(n + 0.999); if (n < 1) n = 1; print n }'
}

# run_wrk URL C SECONDS BODY_FILE: POSTs BODY_FILE to URL with C
# connections (threads: min(C, cores)) for SECONDS and prints the one JSON
# line of .bench/wrk-post.lua's done(); the rest of wrk's output goes to
# the bench log.
run_wrk() {
	local url=$1 c=$2 secs=$3 body=$4 t out
	t=$(($(nproc) < c ? $(nproc) : c))
	out=$(WRK_BODY_FILE=$body wrk -t "$t" -c "$c" -d "${secs}s" --timeout 60s -s "$ROOT/.bench/wrk-post.lua" "$url" 2>&1) || true
	echo "$out" >>"$TMP/bench.log"
	echo "$out" | grep '^{"wrk":' | tail -1
}

# cpu_ticks PID: user+system CPU time of PID so far, in clock ticks (1/100 s).
cpu_ticks() {
	awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$1/stat" 2>/dev/null || echo ""
}
