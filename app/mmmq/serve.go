package main

import (
	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/plugins/profiling"
)

// serve runs the broker through app.Main, the entry point custom binaries
// use too, with the profiling plugin and the build-tagged additions.
func serve(args []string) int {
	// Build-tagged additions first: the crash-test build reads and removes
	// its own MMMQ_CRASHPOINT* variables, which the config would refuse.
	extra := extraOptions()
	return app.Main(
		app.WithArgs(args),
		app.WithName("mmmq"),
		// /debug/pprof/ on its own port when mmmq.profiling.addr is set. Not
		// in app.Modules: importing net/http/pprof also registers its
		// handlers on http.DefaultServeMux, which a custom binary may serve.
		app.WithModules(profiling.Module, extra),
		app.WithSections(profiling.ConfigSection),
	)
}

// sections are the configuration sections of the plugins in this binary:
// those of app.Modules (app.Sections) plus profiling, which serve adds.
// verify and dump load the configuration with them.
func sections() []config.Section {
	return append(app.Sections(), profiling.ConfigSection)
}
