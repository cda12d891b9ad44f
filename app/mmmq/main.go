// Command mmmq is the stock mmmq broker binary: app.Main with the default
// modules plus the profiling plugin, so the command set of package app/cli
// (serve, config check, verify, dump, dispatchers, topics, token, bench,
// version) under the name "mmmq".
//
// The version is set at build time with
// -ldflags "-X github.com/mmmq/mmmq/modules/contract.Version=..." (make build).
package main

import (
	"os"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/plugins/profiling"
)

func main() {
	// Build-tagged additions first: the crash-test build reads and removes
	// its own MMMQ_CRASHPOINT* variables, which the config would refuse.
	extra := extraOptions()
	os.Exit(app.Main(
		app.WithName("mmmq"),
		// /debug/pprof/ on its own port when mmmq.profiling.addr is set. Not
		// in app.Modules: importing net/http/pprof also registers its
		// handlers on http.DefaultServeMux, which a custom binary may serve.
		// Its section, mmmq.profiling, comes with the module.
		app.WithModules(profiling.Module, extra),
	))
}
