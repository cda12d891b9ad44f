package cli

import "go.uber.org/fx"

// app.Main calls Run, so this package's own tests cannot import app; the
// external test file main_ext_test.go sets these from app.

// run is the stock mmmq binary's main without os.Exit (app.Main with its
// modules, the name "mmmq" and args), for the in-process command tests.
var run func(args []string) int

// appOptions is app.Options, for the tests that start a broker.
var appOptions func(opts ...fx.Option) fx.Option

// SetApp sets run and appOptions.
func SetApp(main func(args []string) int, options func(opts ...fx.Option) fx.Option) {
	run, appOptions = main, options
}
