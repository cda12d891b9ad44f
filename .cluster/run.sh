#!/usr/bin/env bash
# make cluster: a 3-node NATS JetStream cluster and two mmmq nodes on it, all
# on loopback, in the foreground (plugins/jetstream/README.md).
#
#   nats n1 n2 n3   clients 4222-4224, routes 6222-6224, monitoring 8222-8224
#                   (configs/cluster/nats-<i>.conf)
#   mmmq-1 mmmq-2   HTTP 8080 / 8081, line protocol 7070 / 7071
#                   (configs/cluster/mmmq-<i>.yaml)
#
# Data under ./data-cluster/, each process's log in ./data-cluster/logs/.
# Every port must be free before anything starts (else it stops at once,
# naming the port and its holder); each server must then hold its own ports
# (checked by process id). A process that fails to start stops them all
# with the tail of its log and exit status 1. Once the cluster is up, a
# process that dies is reported (one line: its name, pid and exit status,
# then the tail of its log) and the others keep running, so that failover
# can be watched. Ctrl-C or SIGTERM stops the mmmq nodes first, then NATS,
# and exits 0.
#
#   .cluster/run.sh restart NAME   (make cluster-restart NODE=NAME)
#
# restarts one node (n1 n2 n3 mmmq-1 mmmq-2) of the running cluster: dead,
# or alive (stopped first). It writes NAME to <data>/restart.request and
# sends SIGUSR1 to the running script (its pid in <data>/run.pid, checked to
# be a live run.sh); the script restarts the node, checks by pid that the
# new process holds its own ports and answers (/healthz, /readyz), reports
# it and writes the outcome to <data>/restart.result, which this command
# prints; it exits 1 when the restart failed or no cluster is running.
#
# CLUSTER_PORT_OFFSET=N adds N to every port (configs rewritten under
# ./data-cluster-N/conf, data under ./data-cluster-N) for a second cluster
# beside the first or a machine where the default ports are taken; give the
# restart the same CLUSTER_PORT_OFFSET.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
MMMQ=${MMMQ:-bin/mmmq}
NATS=bin/nats-server
off=${CLUSTER_PORT_OFFSET:-0}
if ! [[ $off =~ ^[0-9]+$ ]] || ((off > 20000)); then
	echo "cluster: CLUSTER_PORT_OFFSET must be 0..20000, got '$off'" >&2
	exit 2
fi

data=./data-cluster
conf=configs/cluster
if ((off != 0)); then
	data=./data-cluster-$off
	conf=$data/conf
fi
logs=$data/logs
nodes="n1 n2 n3 mmmq-1 mmmq-2"

# restart NAME: the client side of a restart, run by make cluster-restart.
if [[ ${1:-} == restart ]]; then
	name=${2:-}
	if [[ " $nodes " != *" $name "* ]]; then
		echo "cluster: restart which node? NODE must be one of: $nodes (got '$name')" >&2
		exit 2
	fi
	# The pid file is written once the cluster is up and removed when it
	# stops; one left by a script that was killed names a process that is
	# gone, or another program.
	how="make cluster"
	((off == 0)) || how="CLUSTER_PORT_OFFSET=$off make cluster"
	spid=$(cat "$data/run.pid" 2>/dev/null || true)
	if [[ -z $spid ]]; then
		echo "cluster: no cluster is running on $data (no $data/run.pid; start one with $how)" >&2
		exit 1
	fi
	if ! [[ $spid =~ ^[0-9]+$ ]] || ! kill -0 "$spid" 2>/dev/null ||
		! tr '\0' ' ' <"/proc/$spid/cmdline" 2>/dev/null | grep -q '\.cluster/run\.sh'; then
		echo "cluster: no cluster is running on $data: $data/run.pid names pid $spid, which is not a running .cluster/run.sh (stale); start one with $how" >&2
		exit 1
	fi
	rm -f "$data/restart.result"
	printf '%s\n' "$name" >"$data/restart.request.tmp"
	mv "$data/restart.request.tmp" "$data/restart.request"
	kill -USR1 "$spid"
	echo "cluster: asked the cluster (script pid $spid) to restart $name"
	for ((i = 0; i < 1800; i++)); do # 180 s: a stop (up to 35 s) and a start (up to 60 s)
		if [[ -f $data/restart.result ]]; then
			cat "$data/restart.result"
			grep -q '^cluster: ok:' "$data/restart.result"
			exit
		fi
		kill -0 "$spid" 2>/dev/null || { echo "cluster: the cluster (script pid $spid) exited before restarting $name" >&2; exit 1; }
		sleep 0.1
	done
	echo "cluster: no answer from the cluster (script pid $spid) within 180 s; see its output" >&2
	exit 1
fi

# port_holder and holds_port.
# shellcheck source=examples/demo/ports.sh
source examples/demo/ports.sh

say() { printf 'cluster: %s\n' "$*"; }
die() { printf 'cluster: %s\n' "$*" >&2; exit 1; }

# The ports of each process, in the order of its config.
declare -A ports=(
	[n1]="$((4222 + off)) $((6222 + off)) $((8222 + off))"
	[n2]="$((4223 + off)) $((6223 + off)) $((8223 + off))"
	[n3]="$((4224 + off)) $((6224 + off)) $((8224 + off))"
	[mmmq-1]="$((8080 + off)) $((7070 + off))"
	[mmmq-2]="$((8081 + off)) $((7071 + off))"
)
nats_nodes=(n1 n2 n3)
mmmq_nodes=(mmmq-1 mmmq-2)

# 1. Every port free, before anything is built or started.
busy=0
for name in "${nats_nodes[@]}" "${mmmq_nodes[@]}"; do
	for p in ${ports[$name]}; do
		if holder=$(port_holder "$p"); then
			echo "cluster: port $p (for $name) is already in use by $holder" >&2
			busy=1
		fi
	done
done
((busy == 0)) || die "free the ports above, or pick others with CLUSTER_PORT_OFFSET=N (adds N to every port)"

# 2. Configs (rewritten only for an offset) and binaries.
if ((off != 0)); then
	mkdir -p "$conf"
	subst=()
	for p in 4222 4223 4224 6222 6223 6224 8222 8223 8224 8080 8081 7070 7071; do
		subst+=(-e "s/\\b$p\\b/$((p + off))/g")
	done
	subst+=(-e "s|\\./data-cluster/|$data/|g")
	for f in nats-1.conf nats-2.conf nats-3.conf mmmq-1.yaml mmmq-2.yaml; do
		sed "${subst[@]}" "configs/cluster/$f" >"$conf/$f"
	done
fi
mkdir -p "$logs"
if [[ ! -x $MMMQ ]]; then
	"$GO" build -o "$MMMQ" ./app/mmmq
fi
# The nats-server module pinned in go.mod (its tool directive), built once
# into bin/ so that each start runs the binary, not the go command.
"$GO" build -o "$NATS" github.com/nats-io/nats-server/v2

# 3. Processes. Each runs in its own session (setsid) so that a Ctrl-C at the
# terminal reaches only this script, which stops them in order.
declare -A pid=()
declare -A log=()
declare -A url=()  # what answers 2xx once the process is ready
declare -A cmd=()  # how it is started (split on spaces: no spaces in paths)
declare -A down=() # set once the watch has reported it dead
started=()
for i in 1 2 3; do
	url[n$i]="http://127.0.0.1:$((8221 + i + off))/healthz"
	cmd[n$i]="$NATS -c $conf/nats-$i.conf"
done
for i in 1 2; do
	url[mmmq-$i]="http://127.0.0.1:$((8079 + i + off))/readyz"
	cmd[mmmq-$i]="$MMMQ serve --config $conf/mmmq-$i.yaml"
done

alive() { # a zombie (exited, not yet reaped) is not alive
	local state
	state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[[ -n $state && $state != Z ]]
}

grace_of() { # NAME: the seconds a SIGTERM gets before SIGKILL
	case $1 in
	mmmq-*) echo 35 ;; # server.shutdown-timeout is 30s
	*) echo 15 ;;
	esac
}

stop_one() { # NAME: SIGTERM, then SIGKILL after its grace period, then reap
	local name=$1 p=${pid[$1]} grace i
	grace=$(grace_of "$1")
	alive "$p" || { wait "$p" 2>/dev/null || true; return 0; }
	kill -TERM "$p" 2>/dev/null || true
	for ((i = 0; i < grace * 10; i++)); do
		alive "$p" || break
		sleep 0.1
	done
	if alive "$p"; then
		say "$name (pid $p) still running after ${grace}s: SIGKILL"
		kill -KILL "$p" 2>/dev/null || true
	fi
	wait "$p" 2>/dev/null || true
}

stopping=0
stop_all() {
	((stopping == 0)) || return 0
	stopping=1
	local i
	for ((i = ${#started[@]} - 1; i >= 0; i--)); do # mmmq first (started last), then NATS
		stop_one "${started[i]}"
	done
	rm -f "$data/run.pid"
}
trap stop_all EXIT
trap 'say "stopping (mmmq, then NATS)"; stop_all; say stopped; trap - EXIT; exit 0' INT TERM

status_of() { # NAME: "exit status N[, signal S]" of its exited process (reaps it)
	local st=0
	wait "${pid[$1]}" 2>/dev/null || st=$?
	if ((st > 128)); then
		echo "exit status $st, signal $((st - 128))"
	else
		echo "exit status $st"
	fi
}

report() { # NAME WHAT [LINES]: one line, then the tail of its log, on stderr
	echo "cluster: $1 (pid ${pid[$1]}) $2; last lines of ${log[$1]}:" >&2
	tail -n "${3:-25}" "${log[$1]}" | sed 's/^/    /' >&2 || true
}

fatal() { # NAME WHAT: at startup, one process failing stops them all
	local what=$2
	alive "${pid[$1]}" || what="$what ($(status_of "$1"))"
	report "$1" "$what"
	stop_all
	trap - EXIT
	exit 1
}

start() { # NAME: start it, its output appended to its log
	local name=$1
	log[$name]=$logs/$name.log
	printf '\n=== %s started %s: %s\n' "$name" "$(date -u +%FT%TZ)" "${cmd[$name]}" >>"${log[$name]}"
	# shellcheck disable=SC2086 # split on spaces on purpose
	setsid ${cmd[$name]} >>"${log[$name]}" 2>&1 </dev/null &
	pid[$name]=$!
	unset "down[$name]"
}

# await NAME SECONDS: until its url answers 2xx, the process alive; then
# each of its ports must be held by that very process. On failure it prints
# why and fails.
await() {
	local name=$1 secs=$2 i p
	for ((i = 0; i < secs * 10; i++)); do
		alive "${pid[$name]}" || { echo "exited while starting"; return 1; }
		curl -sf -o /dev/null --max-time 1 "${url[$name]}" && break
		sleep 0.1
	done
	((i < secs * 10)) || { echo "did not answer ${url[$name]} within ${secs}s"; return 1; }
	for p in ${ports[$name]}; do
		holds_port "${pid[$name]}" "$p" || { echo "does not hold its port $p (held by $(port_holder "$p" || echo nobody))"; return 1; }
	done
}

for i in 1 2 3; do
	start "n$i"
	started+=("n$i")
done
# /healthz without options answers 200 once JetStream runs, the node is in
# contact with the meta leader and current with it, and its streams are
# recovered: a JetStream cluster that takes writes.
for i in 1 2 3; do
	why=$(await "n$i" 60) || fatal "n$i" "$why"
done
say "NATS JetStream ready (n1 n2 n3)"

export MMMQ_LOGGING_FORMAT=${MMMQ_LOGGING_FORMAT:-console}
for i in 1 2; do
	start "mmmq-$i"
	started+=("mmmq-$i")
done
for i in 1 2; do
	why=$(await "mmmq-$i" 60) || fatal "mmmq-$i" "$why"
done
# SIGUSR1 asks for a restart (section 4); set before the pid file names
# this script, so that an early one does not end it.
restart_wanted=0
trap 'restart_wanted=1' USR1
echo $$ >"$data/run.pid"

h1=127.0.0.1:$((8080 + off))
h2=127.0.0.1:$((8081 + off))
restart_cmd="make cluster-restart NODE=<name>"
((off == 0)) || restart_cmd="CLUSTER_PORT_OFFSET=$off $restart_cmd"
cat <<EOF

mmmq cluster up (script pid $$)
  mmmq-1  http://$h1   line protocol 127.0.0.1:$((7070 + off))   pid ${pid[mmmq-1]}
  mmmq-2  http://$h2   line protocol 127.0.0.1:$((7071 + off))   pid ${pid[mmmq-2]}
  NATS    nats://127.0.0.1:$((4222 + off)),$((4223 + off)),$((4224 + off))   pids ${pid[n1]} ${pid[n2]} ${pid[n3]}
          monitoring http://127.0.0.1:$((8222 + off))/jsz (n1)
  data    $data/   logs $logs/<name>.log

  publish to one node, read from the other:
    curl -s $h1/messages -d '{"topic":"order.created","content":{"orderId":42}}'
    curl -s '$h2/topics/order.created/messages?offset=0&limit=10'

  a node that dies is reported here and the others keep running;
  restart one, dead or alive: $restart_cmd   (n1 n2 n3 mmmq-1 mmmq-2)
  stop: Ctrl-C here, or kill $$ (mmmq first, then NATS)
EOF

# restart NAME: stop it if alive, start it, wait until it answers and holds
# its ports; the outcome on stdout and in <data>/restart.result.
restart() {
	local name=$1 why p i result
	if alive "${pid[$name]}"; then
		say "restarting $name: stopping pid ${pid[$name]}"
		stop_one "$name"
	else
		[[ -n ${down[$name]:-} ]] || wait "${pid[$name]}" 2>/dev/null || true
		say "restarting $name (pid ${pid[$name]} is not running)"
	fi
	for p in ${ports[$name]}; do # free again (a child of the old process may linger)
		for ((i = 0; i < 50; i++)); do
			port_holder "$p" >/dev/null || break
			sleep 0.1
		done
	done
	start "$name"
	if why=$(await "$name" 60); then
		result="ok: $name restarted, pid ${pid[$name]}, holds its ports ${ports[$name]// /, } and answers ${url[$name]}"
		say "${result#ok: }"
	else
		alive "${pid[$name]}" || why="$why ($(status_of "$name"))"
		result="failed: $name did not restart: pid ${pid[$name]} $why (its log: ${log[$name]})"
		report "$name" "did not restart: $why"
		if alive "${pid[$name]}"; then
			kill -KILL "${pid[$name]}" 2>/dev/null || true
			wait "${pid[$name]}" 2>/dev/null || true
		fi
		down[$name]=1
	fi
	printf 'cluster: %s\n' "$result" >"$data/restart.result.tmp"
	mv "$data/restart.result.tmp" "$data/restart.result"
}

# 4. Watch: a process that dies is reported once and the others keep
# running; SIGUSR1, with a node's name in <data>/restart.request, restarts
# that node.
while :; do
	if ((restart_wanted)); then
		restart_wanted=0
		req=$(cat "$data/restart.request" 2>/dev/null || true)
		rm -f "$data/restart.request"
		if [[ " $nodes " == *" $req "* ]]; then
			restart "$req"
		else
			say "SIGUSR1 without a node's name in $data/restart.request (got '$req'): ignored"
		fi
	fi
	for name in "${started[@]}"; do
		if [[ -z ${down[$name]:-} ]] && ! alive "${pid[$name]}"; then
			down[$name]=1
			report "$name" "died ($(status_of "$name")); the others keep running (make cluster-restart NODE=$name)" 10
		fi
	done
	sleep 1 &
	wait $! || true
done
