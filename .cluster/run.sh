#!/usr/bin/env bash
# make cluster: a 3-node NATS JetStream cluster and two mmmq nodes on it, all
# on loopback, in the foreground (plugins/jetstream/README.md).
#
#   nats n1 n2 n3   clients 4222-4224, routes 6222-6224, monitoring 8222-8224
#                   (configs/cluster/nats-<i>.conf)
#   mmmq-1 mmmq-2   HTTP 8080 / 8081, line protocol 7070 / 7071
#                   (configs/cluster/mmmq-<i>.yaml)
#
# Data under ./data/cluster/, each process's log in ./data/cluster/logs/.
# Every port must be free before anything starts (else it stops at once,
# naming the port and its holder); each server must then hold its own ports
# (checked by process id) and stay alive. Ctrl-C or SIGTERM stops the mmmq
# nodes first, then NATS, and exits 0; a process that dies stops them all
# with the tail of its log and exit status 1.
#
# CLUSTER_PORT_OFFSET=N adds N to every port (configs rewritten under
# ./data/cluster-N/conf, data under ./data/cluster-N) for a second cluster
# beside the first or a machine where the default ports are taken.
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

# port_holder and holds_port.
# shellcheck source=examples/demo/ports.sh
source examples/demo/ports.sh

say() { printf 'cluster: %s\n' "$*"; }
die() { printf 'cluster: %s\n' "$*" >&2; exit 1; }

data=./data/cluster
conf=configs/cluster
if ((off != 0)); then
	data=./data/cluster-$off
	conf=$data/conf
fi
logs=$data/logs

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
	subst+=(-e "s|\\./data/cluster/|$data/|g")
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
started=()

alive() { # a zombie (exited, not yet reaped) is not alive
	local state
	state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[[ -n $state && $state != Z ]]
}

stop_one() { # NAME: SIGTERM, then SIGKILL after a grace period, then reap
	local name=$1 p=${pid[$1]} grace=$2 i
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
	local name i
	for ((i = ${#started[@]} - 1; i >= 0; i--)); do # mmmq first (started last), then NATS
		name=${started[i]}
		case $name in
		mmmq-*) stop_one "$name" 35 ;; # server.shutdown-timeout is 30s
		*) stop_one "$name" 15 ;;
		esac
	done
}
trap stop_all EXIT
trap 'say "stopping (mmmq, then NATS)"; stop_all; say stopped; trap - EXIT; exit 0' INT TERM

died() { # NAME WHAT
	local name=$1 what=$2 st=0
	if ! alive "${pid[$name]}"; then
		wait "${pid[$name]}" 2>/dev/null || st=$?
		if ((st > 128)); then
			what="$what (exit status $st, signal $((st - 128)))"
		else
			what="$what (exit status $st)"
		fi
	fi
	echo "cluster: $name (pid ${pid[$name]}) $what; last lines of ${log[$name]}:" >&2
	tail -n 25 "${log[$name]}" >&2 || true
	stop_all
	trap - EXIT
	exit 1
}

start() { # NAME COMMAND...
	local name=$1
	shift
	log[$name]=$logs/$name.log
	printf '\n=== %s started %s: %s\n' "$name" "$(date -u +%FT%TZ)" "$*" >>"${log[$name]}"
	setsid "$@" >>"${log[$name]}" 2>&1 </dev/null &
	pid[$name]=$!
	started+=("$name")
}

await() { # NAME URL SECONDS: until URL answers 2xx, the process alive; then its ports its own
	local name=$1 url=$2 secs=$3 i p
	for ((i = 0; i < secs * 10; i++)); do
		alive "${pid[$name]}" || died "$name" "exited at startup"
		curl -sf -o /dev/null --max-time 1 "$url" && break
		sleep 0.1
	done
	((i < secs * 10)) || died "$name" "did not answer $url within ${secs}s"
	for p in ${ports[$name]}; do
		holds_port "${pid[$name]}" "$p" || died "$name" "does not hold its port $p (held by $(port_holder "$p" || echo nobody))"
	done
}

for i in 1 2 3; do
	start "n$i" "$NATS" -c "$conf/nats-$i.conf"
done
# /healthz without options answers 200 once JetStream runs, the node is in
# contact with the meta leader and current with it, and its streams are
# recovered: a JetStream cluster that takes writes.
for i in 1 2 3; do
	await "n$i" "http://127.0.0.1:$((8221 + i + off))/healthz" 60
done
say "NATS JetStream ready (n1 n2 n3)"

export MMMQ_LOGGING_FORMAT=${MMMQ_LOGGING_FORMAT:-console}
for i in 1 2; do
	start "mmmq-$i" "$MMMQ" serve --config "$conf/mmmq-$i.yaml"
done
for i in 1 2; do
	await "mmmq-$i" "http://127.0.0.1:$((8079 + i + off))/readyz" 60
done

h1=127.0.0.1:$((8080 + off))
h2=127.0.0.1:$((8081 + off))
cat <<EOF

mmmq cluster up (script pid $$)
  mmmq-1  http://$h1   line protocol 127.0.0.1:$((7070 + off))   pid ${pid[mmmq-1]}
  mmmq-2  http://$h2   line protocol 127.0.0.1:$((7071 + off))   pid ${pid[mmmq-2]}
  NATS    nats://127.0.0.1:$((4222 + off)),$((4223 + off)),$((4224 + off))   monitoring http://127.0.0.1:$((8222 + off))/jsz (n1)
  data    $data/   logs $logs/<name>.log

  publish to one node, read from the other:
    curl -s $h1/messages -d '{"topic":"order.created","content":{"orderId":42}}'
    curl -s '$h2/topics/order.created/messages?offset=0&limit=10'

  stop: Ctrl-C here, or kill $$ (mmmq first, then NATS)
EOF

# 4. Watch: a process that dies stops the others.
while :; do
	for name in "${started[@]}"; do
		alive "${pid[$name]}" || died "$name" "exited"
	done
	sleep 1 &
	wait $! || true
done
