// Command custom-broker is a custom mmmq binary: the default modules
// (app.New) plus a plugin package of its own that provides Dispatchers in Go
// and reads its own configuration section, mmmq.orders
// (examples/custom-broker/orders). Build and run it like the stock binary:
//
//	go run ./examples/custom-broker --config configs/mmmq.yaml
//
// then start consumers on :8081 and :8082 (go run ./examples/consumer -addr
// :8081) and publish with curl. Move a consumer with
// MMMQ_ORDERS_ORDER_HOST=http://localhost:9081 (or mmmq.orders.order-host in
// the file).
//
// It has every default module, the line protocol included (it listens when
// mmmq.lineproto.addr is set), but not the profiling plugin: the stock
// configs/mmmq.yaml still loads, with a warning for mmmq.profiling.addr (at
// its default); setting it to another value stops startup naming the key
// and the missing plugin.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/examples/custom-broker/orders"
	"github.com/mmmq/mmmq/modules/config"
)

func main() {
	cfgPath := flag.String("config", "", "YAML config file (default configs/mmmq.yaml when present)")
	flag.Parse()
	// Load before building the application, so a bad key is reported on one
	// line. The loader must know every plugin section of this binary: the
	// default modules' (app.Sections) and the orders plugin's.
	cfg, err := config.Load(config.LoadOptions{
		Path:         *cfgPath,
		PathExplicit: *cfgPath != "",
		Sections:     append(app.Sections(), orders.ConfigSection),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "custom-broker: startup failed:", err)
		os.Exit(1)
	}
	a := app.New(config.Supply(cfg), orders.Module) // app.New logs cfg.Warnings
	if err := a.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "custom-broker: startup failed:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	if err := a.Stop(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "custom-broker: stop:", err)
		os.Exit(1)
	}
}
