# shellcheck shell=bash
# ports.sh — sourced by the scripts that start servers (examples/demo/demo.sh,
# .bench/run.sh, .cluster/run.sh): pick a free loopback port, name who holds
# a port, check that a given process is the one listening on it, and start
# a broker and wait for it (launch_broker), so that
# a script never talks to a server that is not its own. Linux only (/proc).

# EPHEMERAL_LOW is the bottom of the kernel's ephemeral port range: free
# ports are picked below it, away from client sockets.
EPHEMERAL_LOW=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)

# free_port prints a loopback TCP port nobody listens on, in
# 10000..EPHEMERAL_LOW.
free_port() {
	local p
	while :; do
		p=$((10000 + RANDOM % (EPHEMERAL_LOW - 10000)))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

# holds_port PID PORT: whether process PID has a TCP socket listening on
# PORT (the listening socket's inode is among PID's open files). A /readyz
# answer alone could come from another process that took the port first.
holds_port() {
	local pid=$1 hex inode fd
	hex=$(printf ':%04X' "$2")
	while read -r inode; do
		for fd in "/proc/$pid/fd"/*; do
			if [[ $(readlink "$fd" 2>/dev/null) == "socket:[$inode]" ]]; then
				return 0
			fi
		done
	done < <(awk -v h="$hex" '$4 == "0A" && substr($2, length($2) - 4) == h {print $10}' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
	return 1
}

# port_holder PORT: prints who listens on TCP PORT ("pid 123 (redis-server)",
# or "a process not visible from here" when no visible process has the
# socket open) and succeeds; fails, printing nothing, when nobody listens.
port_holder() {
	local hex inode fd pid
	hex=$(printf ':%04X' "$1")
	inode=$(awk -v h="$hex" '$4 == "0A" && substr($2, length($2) - 4) == h {print $10; exit}' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
	[[ -n $inode ]] || return 1
	# One find over every process's open files (a readlink per file took
	# seconds per port on a busy machine).
	fd=$(find /proc/[0-9]*/fd -maxdepth 1 -lname "socket:\[$inode\]" -print -quit 2>/dev/null)
	if [[ -n $fd ]]; then
		pid=${fd#/proc/}
		pid=${pid%%/*}
		echo "pid $pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo '?'))"
		return 0
	fi
	echo "a process not visible from here"
}

# await_broker PID PORT LOG: waits (10 s at most) until process PID holds
# PORT and answers GET /readyz 200; exits the script, printing LOG, when
# the process ended first, or saying so when it never held the port.
await_broker() {
	local pid=$1 port=$2 log=$3
	for _ in $(seq 100); do
		holds_port "$pid" "$port" && curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || { echo "broker did not start:"; cat "$log"; exit 1; }
		sleep 0.1
	done
	holds_port "$pid" "$port" || { echo "broker does not hold port $port"; exit 1; }
}

# launch_broker BIN DATA_DIR CONFIG_FILE LOG [VAR=VALUE...]: starts
# `BIN serve --config CONFIG_FILE` on a free loopback port with its data in
# DATA_DIR and the extra environment, appending its output to LOG, and
# waits (30 s at most) until the process itself holds the port (and every
# port in ALSO_PORTS, space-separated) and answers GET /readyz 200. Sets
# BROKER_PID, BROKER_URL and READY_MS (milliseconds from exec to ready).
# Returns 1 when the port was taken between the check and the bind (the
# caller tries again); exits the script, printing the log's tail, when the
# broker exits at startup for another reason or is not ready in time.
launch_broker() {
	local bin=$1 data=$2 cfg=$3 log=$4 port t0 i p held
	shift 4
	port=$(free_port)
	BROKER_URL=http://127.0.0.1:$port
	t0=$(date +%s%N)
	env MMMQ_SERVER_HOST=127.0.0.1 MMMQ_SERVER_PORT="$port" MMMQ_BROKER_STORAGE_ROOT_DIR="$data" "$@" \
		"$bin" serve --config "$cfg" >>"$log" 2>&1 &
	BROKER_PID=$!
	for ((i = 0; i < 6000; i++)); do
		if [ "$(curl -s -o /dev/null -w '%{http_code}' "$BROKER_URL/readyz" 2>/dev/null)" = 200 ] &&
			holds_port "$BROKER_PID" "$port"; then
			held=1
			for p in ${ALSO_PORTS:-}; do
				holds_port "$BROKER_PID" "$p" || held=0
			done
			if [ "$held" = 1 ]; then
				READY_MS=$((($(date +%s%N) - t0) / 1000000))
				return 0
			fi
		fi
		if ! kill -0 "$BROKER_PID" 2>/dev/null; then
			wait "$BROKER_PID" 2>/dev/null || true
			BROKER_PID=""
			if tail -3 "$log" | grep -q 'address already in use'; then
				return 1
			fi
			echo "broker $bin exited at startup (environment: ${*:-none}); log:" >&2
			tail -20 "$log" >&2
			exit 1
		fi
		sleep 0.005
	done
	echo "broker $bin not ready after 30s; log:" >&2
	tail -20 "$log" >&2
	exit 1
}
