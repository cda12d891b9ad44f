// Package app is the composition root of mmmq: New builds the Fx
// application with the default module set, to which a custom binary adds its
// own plugins (for example Dispatchers provided with dispatcher.Provide).
// Main is the whole entry point of such a binary, the one the stock mmmq
// binary runs (the operator commands of app/cli; for serve: flags,
// configuration loaded first, one-line startup errors, signals, exit
// codes):
//
//	func main() {
//		os.Exit(app.Main(app.WithModules(orders.Module)))
//	}
//
// (the binary gets every command of the stock mmmq under its own name, and
// the configuration is loaded with the sections its modules register with
// config.ProvideSection).
//
// (app.New(...).Run() also works, but reports a failed startup with Fx's
// whole event log and error chain on stderr.)
//
// A custom binary drops or replaces a default module by name with Without
// and Replace, passed to New like any other option:
//
//	app.New(app.Without(app.LineProto), orders.Module)
//	app.New(app.Replace(app.Metrics, mymetrics.Module))
package app

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/auth"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/logging"
	"github.com/mmmq/mmmq/modules/recovery"
	"github.com/mmmq/mmmq/modules/reload"
	"github.com/mmmq/mmmq/modules/retention"
	"github.com/mmmq/mmmq/modules/schedule"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/tracing"
	"github.com/mmmq/mmmq/plugins/configdispatchers"
	"github.com/mmmq/mmmq/plugins/jetstream"
	"github.com/mmmq/mmmq/plugins/lineproto"
	"github.com/mmmq/mmmq/plugins/metrics"
	"github.com/mmmq/mmmq/plugins/ui"
)

// StopTimeout bounds the whole graceful stop (HTTP drain, dispatch workers,
// closing the logs). server.shutdown-timeout bounds the HTTP part inside it.
const StopTimeout = 90 * time.Second

// Names of the default modules, for Without and Replace.
const (
	Config            = "config"
	Logging           = "logging"
	Tracing           = "tracing"
	Storage           = "storage"
	TopicQueue        = "topicqueue"
	JetStream         = "jetstream"
	Recovery          = "recovery"
	Dispatcher        = "dispatcher"
	ConfigDispatchers = "configdispatchers"
	Groups            = "groups"
	Admin             = "admin"
	Retention         = "retention"
	Schedule          = "schedule"
	Auth              = "auth"
	Metrics           = "metrics"
	UI                = "ui"
	HTTPAPI           = "httpapi"
	LineProto         = "lineproto"
	Reload            = "reload"
	Ready             = "ready"
)

// module is one entry of the default module set.
type module struct {
	name string
	opt  fx.Option
}

// defaults is the default module set in start order. Each module appends
// its start and stop hooks from its own fx.Invoke, so hooks run in this
// order on start and in reverse on stop:
//
//	start: logging → data-root lock (topicqueue) → recovery → dispatchers →
//	       consumer groups → admin (dispatchers.json) → retention loop →
//	       scheduled-message recovery and mover → token-file polling → metrics → status page sampler → HTTP API → line
//	       protocol → SIGHUP handler → ready
//	stop:  not ready → line protocol and HTTP stop accepting (HTTP drains
//	       the groups' long polls, then waits for in-flight requests) →
//	       status page sampler → token-file polling → scheduled-message mover → retention loop → consumer groups → dispatchers drain → logs
//	       close → lock released → NATS connection closed (backend jetstream) → logger flushed
//
// app_test.go's stop-order test pins this.
func defaults() []module {
	return []module{
		{Config, config.Module},
		{Logging, logging.Module},
		{Tracing, tracing.Module}, // OpenTelemetry spans; off unless mmmq.tracing.exporter is set
		{Storage, storage.Module},
		{JetStream, jetstream.Module}, // the JetStream storage backend; connects only with mmmq.broker.storage.backend: jetstream
		{TopicQueue, topicqueue.Module},
		{Recovery, recovery.Module},
		{Dispatcher, dispatcher.Module},
		{ConfigDispatchers, configdispatchers.Module},
		{Groups, groups.Module},
		{Admin, admin.Module},         // loads dispatchers.json; serves /mmmq/dispatchers
		{Retention, retention.Module}, // runs only when a retention limit is set
		{Schedule, schedule.Module},   // scheduled messages (deliverAt, delay): <root>/.scheduled, the mover
		{Auth, auth.Module},           // mmmq.auth: tokens, limits; polls token files
		{Metrics, metrics.Module},
		{UI, ui.Module}, // the status page under /ui/ (mmmq.ui.enabled)
		{HTTPAPI, httpapi.Module},
		{LineProto, lineproto.Module}, // listens only when mmmq.lineproto.addr is set
		{Reload, reload.Module},       // SIGHUP re-reads token files and TLS certificates
		{Ready, recovery.Ready},
	}
}

// Modules is the default module set, in start order (see the package
// documentation for Without and Replace, which edit it by name). New adds
// the caller's options before the last one, Ready, so that readiness still
// comes after every start hook.
func Modules() fx.Option {
	main, ready := modulesWith(nil)
	return fx.Options(main, ready)
}

// Sections returns the configuration sections of the application that
// New(opts...) builds: every section that its modules (the default ones,
// less those that Without and Replace among opts take out, plus the
// modules in opts) register with config.ProvideSection, found with
// config.FindSections, sorted by key. It is the one list of sections: Main
// loads with it, config.Module (which loads inside the application) reads
// the same registrations, and a binary that loads the configuration itself
// passes it in config.LoadOptions.Sections with the options it gives New:
//
//	opts := []fx.Option{app.Without(app.LineProto), profiling.Module}
//	cfg, err := config.Load(config.LoadOptions{Sections: app.Sections(opts...)})
//	a := app.New(append(opts, config.Supply(cfg))...)
//
// A section loaded for a module the application does not contain, with a
// value other than its default, makes the application fail naming the key.
// When opts cannot be assembled (a module's fx.Error, two providers of one
// type), Sections returns nil and New(opts...) reports the error.
func Sections(opts ...fx.Option) []config.Section {
	secs, err := config.FindSections(Options(opts...))
	if err != nil {
		return nil
	}
	slices.SortFunc(secs, func(a, b config.Section) int { return strings.Compare(a.Key(), b.Key()) })
	return secs
}

// ModuleNames lists the names of the default modules in start order.
func ModuleNames() []string {
	var out []string
	for _, m := range defaults() {
		out = append(out, m.name)
	}
	return out
}

// edit is an option of New that edits the default module set instead of
// adding to the graph. It embeds an empty fx.Option so that it can be passed
// among New's fx options.
type edit struct {
	fx.Option
	name    string
	replace fx.Option // nil: drop the module
}

// Without drops the default module name (one of the constants above) from
// the application built by New or Options: for example
// app.Without(app.LineProto) for a binary without the TCP listener. Whatever
// else needs what that module provided must then get it elsewhere, or Fx
// reports the missing type when the application is built. An unknown name
// makes New fail with the list of valid names.
func Without(name string) fx.Option {
	return &edit{Option: fx.Options(), name: name}
}

// Replace puts opt in the place of the default module name (same position,
// so the same start and stop order): for example a module providing another
// *httpapi.Server. An unknown name makes New fail.
func Replace(name string, opt fx.Option) fx.Option {
	if opt == nil {
		opt = fx.Options()
	}
	return &edit{Option: fx.Options(), name: name, replace: opt}
}

// modulesWith returns the default modules edited by edits, the last one
// (Ready) apart.
func modulesWith(edits []*edit) (main, ready fx.Option) {
	mods := defaults()
	var opts []fx.Option
	known := map[string]bool{}
	for _, m := range mods {
		known[m.name] = true
	}
	for _, e := range edits {
		if !known[e.name] {
			return fx.Error(fmt.Errorf("app: no default module %q (have %s)", e.name, strings.Join(ModuleNames(), ", "))), fx.Options()
		}
	}
	for _, m := range mods {
		opt := m.opt
		for _, e := range edits {
			if e.name == m.name {
				opt = e.replace
			}
		}
		if opt == nil {
			opt = fx.Options()
		}
		opts = append(opts, opt)
	}
	return fx.Options(opts[:len(opts)-1]...), opts[len(opts)-1]
}

// New returns the mmmq application: the default modules (edited by any
// Without or Replace among opts) plus opts (plugins,
// fx.Supply(config.LoadOptions{...}), fx.Decorate overrides). The broker
// reports ready (/readyz) once every start hook has run. Main builds the
// application with New.
func New(opts ...fx.Option) *fx.App {
	return fx.New(Options(opts...))
}

// Options is everything New passes to fx.New, for tests that build the
// application with fxtest.New(t, app.Options(...)).
func Options(opts ...fx.Option) fx.Option {
	var edits []*edit
	var rest []fx.Option
	for _, o := range opts {
		if e, ok := o.(*edit); ok {
			edits = append(edits, e)
			continue
		}
		rest = append(rest, o)
	}
	main, ready := modulesWith(edits)
	return fx.Options(
		main,
		fx.Options(rest...),
		ready,
		fx.StopTimeout(StopTimeout),
	)
}
