package cli_test

import (
	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/app/cli"
	"github.com/mmmq/mmmq/plugins/profiling"
)

// The tests of this package run the commands as the stock binary
// (app/mmmq) does.
func init() {
	cli.SetApp(func(args []string) int {
		return app.Main(app.WithArgs(args), app.WithName("mmmq"), app.WithModules(profiling.Module))
	}, app.Options)
}
