// Command mybroker is an mmmq broker with a plugin of its own: every
// command of the stock binary (serve, config check, verify, dump,
// dispatchers, topics, token, version) under its own name.
package main

import (
	"os"

	"github.com/mmmq/mmmq/app"

	"example.com/mybroker/orders"
)

func main() {
	os.Exit(app.Main(app.WithModules(orders.Module)))
}
