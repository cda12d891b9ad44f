// Command custom-broker is a custom mmmq binary: the default modules less
// the line protocol, plus a plugin package of its own
// (examples/custom-broker/orders) that provides Dispatchers in Go and reads
// its own configuration section, mmmq.orders. Build and run it like the
// stock binary:
//
//	go run ./examples/custom-broker --config configs/mmmq.yaml
//
// then start consumers on :8081 and :8082 (go run ./examples/consumer -addr
// :8081) and publish with curl. Move a consumer with
// MMMQ_ORDERS_ORDER_HOST=http://localhost:9081 (or mmmq.orders.order-host in
// the file).
//
// app.Main gives it the stock binary's command set under its own name
// (custom-broker serve, config check, verify, dump, dispatchers, topics,
// token, version) and serve's behaviour: --config (or $MMMQ_CONFIG, else
// configs/mmmq.yaml when present), the configuration loaded before the
// application is built, with the section of every module it is given
// (mmmq.orders comes with orders.Module), one line on stderr when startup
// fails ("custom-broker: startup failed: <root cause>", exit 1), exit 2 for
// bad usage, a graceful stop on SIGINT or SIGTERM (exit 0).
//
// It has neither the line protocol (app.Without(app.LineProto)) nor the
// profiling plugin: the stock configs/mmmq.yaml still loads, with a warning
// for each of their keys at its default (mmmq.lineproto.addr,
// mmmq.profiling.addr); setting one to another value stops startup naming
// the key and the missing plugin.
package main

import (
	"os"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/examples/custom-broker/orders"
)

func main() {
	// Default modules are edited by name; Main also drops the section of a
	// dropped module from the configuration it loads, so mmmq.lineproto.*
	// set to a non-default value is refused instead of ignored. The orders
	// plugin brings its own keys, mmmq.orders.* (file and MMMQ_ORDERS_*).
	os.Exit(app.Main(app.WithModules(app.Without(app.LineProto), orders.Module)))
}
