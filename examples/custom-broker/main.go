// Command custom-broker is a custom mmmq binary: the default modules
// (app.New) plus a plugin package of its own that provides Dispatchers in Go
// (examples/custom-broker/orders). Build and run it like the stock binary:
//
//	go run ./examples/custom-broker --config configs/mmmq.yaml
//
// then start consumers on :8081 and :8082 (go run ./examples/consumer -addr
// :8081) and publish with curl.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/fx"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/examples/custom-broker/orders"
	"github.com/mmmq/mmmq/modules/config"
)

func main() {
	cfgPath := flag.String("config", "", "YAML config file (default configs/mmmq.yaml when present)")
	flag.Parse()
	a := app.New(
		fx.Supply(config.LoadOptions{Path: *cfgPath, PathExplicit: *cfgPath != ""}),
		orders.Module,
	)
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
