package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/dig"
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/plugins/profiling"
)

func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "YAML config file (default configs/mmmq.yaml when present)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// Build-tagged additions first: the crash-test build reads and removes
	// its own MMMQ_CRASHPOINT* variables, which the config would refuse.
	extra := extraOptions()
	// The configuration is loaded before the application is built, so that
	// a bad key or value is reported on one line instead of after Fx's
	// event log (which goes to stderr while no logger is configured).
	// The sections of every plugin below are passed to the loader (the
	// plugins' modules register them again with config.ProvideSection, which
	// config.Supply ignores); the app logs cfg.Warnings.
	cfg, err := config.Load(config.LoadOptions{Path: *cfgPath, PathExplicit: *cfgPath != "", Sections: sections()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mmmq: startup failed:", oneLine(err))
		return 1
	}
	a := app.New(
		config.Supply(cfg),
		// /debug/pprof/ on its own port when mmmq.profiling.addr is set. Not
		// in app.Modules: importing net/http/pprof also registers its
		// handlers on http.DefaultServeMux, which a custom binary may serve.
		profiling.Module,
		// One debug line per skipped Kubernetes service-link variable.
		fx.Invoke(logIgnoredVars),
		extra,
	)
	if err := a.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "mmmq: startup failed:", oneLine(err))
		return 1
	}
	startCtx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	err = a.Start(startCtx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mmmq: startup failed:", oneLine(err))
		stopCtx, cancel := context.WithTimeout(context.Background(), app.StopTimeout)
		_ = a.Stop(stopCtx)
		cancel()
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sig:
	case <-a.Done():
	}
	signal.Stop(sig)
	stopCtx, cancel := context.WithTimeout(context.Background(), app.StopTimeout)
	defer cancel()
	if err := a.Stop(stopCtx); err != nil {
		fmt.Fprintln(os.Stderr, "mmmq: stop:", oneLine(err))
		return 1
	}
	return 0
}

// sections are the configuration sections of the plugins in this binary:
// those of app.Modules (app.Sections) plus profiling, which serve adds.
// serve, verify and dump load the configuration with them.
func sections() []config.Section {
	return append(app.Sections(), profiling.ConfigSection)
}

// oneLine reduces an Fx error to its root cause on one line.
func oneLine(err error) string {
	root := dig.RootCause(err)
	if root == nil {
		root = err
	}
	var s string
	if j, ok := root.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 1 {
		for i, e := range j.Unwrap() {
			if i > 0 {
				s += "; "
			}
			s += e.Error()
		}
	} else {
		s = root.Error()
	}
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r == '\n' {
			r = ' '
		}
		out = append(out, r)
	}
	return string(out)
}
