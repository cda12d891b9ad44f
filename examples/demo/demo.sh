#!/usr/bin/env bash
# make demo: broker + two consumers + producer on examples/data/orders-events.jsonl,
# then check that every event arrived, in order per topic. Uses a temp data
# dir and ports 18080/18081/18082 so it never touches ./data.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
keep_log() { echo "--- broker log (last 30 lines)"; tail -30 "$work/broker.log"; }
trap 'keep_log' ERR

go build -o "$work/mmmq" ./app/mmmq
go build -o "$work/consumer" ./examples/consumer
go build -o "$work/producer" ./examples/producer

cat > "$work/mmmq.yaml" <<YAML
server:
  port: 18080
logging:
  level: info
mmmq:
  broker:
    storage:
      root-dir: $work/data
    dispatchers:
      - name: order-dispatcher
        host: http://127.0.0.1:18081
        patterns: ["order.**", "payment.*"]
      - name: notification-dispatcher
        host: http://127.0.0.1:18082
        patterns: ["notification.**"]
YAML

"$work/consumer" -addr 127.0.0.1:18081 -record "$work/orders.jsonl" -quiet & pids+=($!)
"$work/consumer" -addr 127.0.0.1:18082 -record "$work/notifications.jsonl" -quiet & pids+=($!)
"$work/mmmq" serve --config "$work/mmmq.yaml" 2> "$work/broker.log" & pids+=($!)
for _ in $(seq 100); do curl -sf localhost:18080/readyz >/dev/null 2>&1 && break; sleep 0.1; done

echo "== publishing examples/data/orders-events.jsonl"
"$work/producer" -url http://127.0.0.1:18080 -c 8 -file examples/data/orders-events.jsonl

echo "== waiting for delivery"
want=$(wc -l < examples/data/orders-events.jsonl)
for _ in $(seq 600); do
  got=$(cat "$work/orders.jsonl" "$work/notifications.jsonl" 2>/dev/null | grep -c '"answer":"ACK"' || true)
  [ "$got" -ge "$want" ] && break
  sleep 0.1
done
echo "== checking"
go run ./examples/demo/check -data examples/data/orders-events.jsonl "$work/orders.jsonl" "$work/notifications.jsonl"
