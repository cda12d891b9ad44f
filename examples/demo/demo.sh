#!/usr/bin/env bash
# make demo: broker + two consumers + producer on examples/data/orders-events.jsonl,
# then check that every event arrived, in order per topic. Uses a temp data
# dir and free loopback ports, so it never touches ./data nor a broker or
# consumer that already runs. Every server it starts must hold its own port
# (checked by process id): a server that did not start stops the demo at once
# with its error.
#
# DEMO_BROKER_PORT, DEMO_ORDER_PORT, DEMO_NOTIFICATION_PORT force the ports
# (default: free ones picked at random).
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# free_port and holds_port.
source examples/demo/ports.sh

# await_server NAME PID PORT LOG: waits (10 s) until process PID listens on
# PORT; if it exits or never does, prints LOG and fails the demo.
await_server() {
	local name=$1 pid=$2 port=$3 log=$4 i
	for ((i = 0; i < 200; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "demo: $name (pid $pid) exited at startup on port $port:" >&2
			tail -20 "$log" >&2
			exit 1
		fi
		holds_port "$pid" "$port" && return 0
		sleep 0.05
	done
	echo "demo: $name (pid $pid) does not listen on port $port after 10 s:" >&2
	tail -20 "$log" >&2
	exit 1
}

bport=${DEMO_BROKER_PORT:-$(free_port)}
oport=${DEMO_ORDER_PORT:-$(free_port)}
nport=${DEMO_NOTIFICATION_PORT:-$(free_port)}

go build -o "$work/mmmq" ./app/mmmq
go build -o "$work/consumer" ./examples/consumer
go build -o "$work/producer" ./examples/producer

cat > "$work/mmmq.yaml" <<YAML
server:
  host: 127.0.0.1
  port: $bport
logging:
  level: info
mmmq:
  broker:
    storage:
      root-dir: $work/data
    dispatchers:
      - name: order-dispatcher
        host: http://127.0.0.1:$oport
        patterns: ["order.**", "payment.*"]
      - name: notification-dispatcher
        host: http://127.0.0.1:$nport
        patterns: ["notification.**"]
YAML

"$work/consumer" -addr "127.0.0.1:$oport" -record "$work/orders.jsonl" -quiet 2> "$work/order-consumer.log" & pids+=($!)
await_server "order consumer" "$!" "$oport" "$work/order-consumer.log"
"$work/consumer" -addr "127.0.0.1:$nport" -record "$work/notifications.jsonl" -quiet 2> "$work/notification-consumer.log" & pids+=($!)
await_server "notification consumer" "$!" "$nport" "$work/notification-consumer.log"
"$work/mmmq" serve --config "$work/mmmq.yaml" 2> "$work/broker.log" & broker=$!
pids+=("$broker")
await_server broker "$broker" "$bport" "$work/broker.log"
for _ in $(seq 100); do curl -sf "127.0.0.1:$bport/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
# Still ours after readiness (it could have failed in a later start step).
await_server broker "$broker" "$bport" "$work/broker.log"
trap 'echo "--- broker log (last 30 lines)"; tail -30 "$work/broker.log"' ERR

echo "== publishing examples/data/orders-events.jsonl to 127.0.0.1:$bport"
"$work/producer" -url "http://127.0.0.1:$bport" -c 8 -file examples/data/orders-events.jsonl

echo "== waiting for delivery"
want=$(wc -l < examples/data/orders-events.jsonl)
# Distinct (topic, offset) pairs answered ACK: a message delivered twice
# (at-least-once) must not make the count reach the total early.
for _ in $(seq 600); do
  got=$(cat "$work/orders.jsonl" "$work/notifications.jsonl" 2>/dev/null | grep '"answer":"ACK"' |
    sed -n 's/.*"topic":"\([^"]*\)","offset":\([0-9]*\),.*/\1 \2/p' | sort -u | wc -l)
  [ "$got" -ge "$want" ] && break
  sleep 0.1
done
echo "== checking"
go run ./examples/demo/check -data examples/data/orders-events.jsonl "$work/orders.jsonl" "$work/notifications.jsonl"
