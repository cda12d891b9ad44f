package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/app/cli"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/logging"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// StartTimeout bounds the start of the application built by Main (startup
// recovery included) before it gives up with "startup failed".
const StartTimeout = 5 * time.Minute

// NoConfigFile is what the startup log line of Main says for the
// configuration file when none was read (only the built-in defaults and the
// environment).
const NoConfigFile = "none, built-in defaults"

// MainOption configures Main. Build them with WithModules,
// WithConfigPath, WithArgs, WithName, WithVersion, WithOutput and
// WithContext.
type MainOption func(*mainSettings)

type mainSettings struct {
	modules     []fx.Option
	configPath  string
	args        []string
	argsSet     bool
	name        string
	version     string
	secs        []config.Section // findSections: what serve loads with
	sectionsErr error            // findSections failed: serve reports it
	stdout      io.Writer
	stderr      io.Writer
	ctx         context.Context
	log         *zap.Logger // the broker's logger "app", once built
}

// WithModules adds opts to the application exactly as New takes them:
// plugin modules (for example one providing Dispatchers with
// dispatcher.Provide), Without and Replace edits of the default module set,
// fx.Decorate overrides. Several WithModules add up, in order.
func WithModules(opts ...fx.Option) MainOption {
	return func(s *mainSettings) { s.modules = append(s.modules, opts...) }
}

// WithConfigPath names the YAML configuration file the binary's author
// chose, used when neither --config nor $MMMQ_CONFIG is given. Unlike the
// built-in default (config.DefaultPath), this file must exist: a missing
// one stops startup with an error naming it. A relative path is relative
// to the working directory.
func WithConfigPath(path string) MainOption {
	return func(s *mainSettings) { s.configPath = path }
}

// WithArgs sets the command-line arguments Main parses, without the program
// name; the default is os.Args[1:].
func WithArgs(args []string) MainOption {
	return func(s *mainSettings) { s.args, s.argsSet = args, true }
}

// WithName sets the program name Main's commands print: in the usage, as
// the prefix of their stderr lines ("<name>: startup failed: ...",
// "<name>: unknown command ...") and in the line of version. The default
// is the base name of os.Args[0] (the file the binary was built as), or
// "mmmq" when that is empty.
func WithName(name string) MainOption {
	return func(s *mainSettings) { s.name = name }
}

// WithVersion sets what the version command prints after the program
// name; the default is contract.Version (the mmmq version set at build
// time with -ldflags "-X github.com/mmmq/mmmq/modules/contract.Version=...",
// else "dev").
func WithVersion(v string) MainOption {
	return func(s *mainSettings) { s.version = v }
}

// WithOutput sets where Main writes its own lines: stdout gets the usage
// asked for with -h and the version line, stderr the failure line and
// usage errors. The broker's log is not redirected: it goes to the
// process's stderr; nor is the output of the commands other than serve
// (verify, dump, config check, ...), which write to os.Stdout and
// os.Stderr. nil keeps os.Stdout or os.Stderr.
func WithOutput(stdout, stderr io.Writer) MainOption {
	return func(s *mainSettings) { s.stdout, s.stderr = stdout, stderr }
}

// WithContext makes the broker stop, as on SIGINT, when ctx is done (for
// tests and for programs that embed the broker). Main still stops on SIGINT
// and SIGTERM.
func WithContext(ctx context.Context) MainOption {
	return func(s *mainSettings) { s.ctx = ctx }
}

// Main runs an mmmq binary, with the whole command set of the stock mmmq
// under the binary's own name (WithName), and returns the process exit
// code. A custom binary's main is
//
//	func main() {
//		os.Exit(app.Main(app.WithModules(orders.Module)))
//	}
//
// where orders.Module is a plugin module; one with a configuration section
// of its own includes config.ProvideSection(ConfigSection), and Main loads
// the configuration with that section (see Sections).
//
// The first argument names the command (package app/cli): serve (the
// default, also when the first argument is a flag), config check, verify,
// dump, dispatchers, topics, token, bench, version; -h, --help or help list
// them on stdout, an unknown one is exit 2 with the list on stderr. serve
// parses its flags (--config FILE; -h prints its usage on stdout), loads
// the configuration before building the application, builds it with New,
// starts it within StartTimeout, waits for SIGINT or SIGTERM (or the
// context of WithContext, or the application's own shutdown) and stops it
// within StopTimeout. config check, verify and dump load the configuration
// with the same sections as serve.
//
// The configuration file is, in this order: --config, $MMMQ_CONFIG,
// WithConfigPath — each of them must exist —, else config.DefaultPath when
// it exists, else none (built-in defaults and the environment). Once the
// logger is up, one info line (logger "app", message "configuration") gives
// the file ("config-file": its absolute path, or NoConfigFile) and the data
// directory ("data-dir", absolute).
//
// Exit codes of serve: 0 after a clean stop; 1 when the configuration, the
// build, the start or the stop fails, with exactly one line on stderr,
// "<name>: startup failed: <root cause>" or "<name>: stop: <root cause>";
// 2 for bad usage (unknown flag, unexpected argument), with the flag
// package's message and the usage on stderr. Fx's own error records are not
// logged: the line says what failed. The other commands' exit codes are
// those of package app/cli.
func Main(opts ...MainOption) int {
	s := newMainSettings(opts)
	s.secs = s.findSections()
	return cli.Run(cli.Program{
		Name:       s.name,
		Version:    s.version,
		Serve:      s.serve,
		Sections:   s.secs,
		ConfigPath: s.configPath,
		Stdout:     s.stdout,
		Stderr:     s.stderr,
	}, s.args)
}

// findSections returns the configuration sections of the application's
// modules (the default ones kept and those of WithModules, found with
// config.FindSections, as Sections does). When the modules cannot even be
// assembled, it keeps the error for serve to report and returns none.
func (s *mainSettings) findSections() []config.Section {
	found, err := config.FindSections(Options(s.modules...))
	s.sectionsErr = err
	return found
}

// serve is the serve command: it runs the broker until it is stopped and
// returns the exit code (see Main).
func (s *mainSettings) serve(args []string) int {
	cfgPath, code, ok := s.parseFlags(args)
	if !ok {
		return code
	}
	a, err := s.build(cfgPath)
	if err != nil {
		return s.startupFailed(err)
	}
	// Caught from before Start: /readyz turns true during Start, and a
	// SIGTERM sent as soon as it does must stop the broker cleanly, not
	// kill it with the default action. One that arrives during Start is
	// acted on once Start returns.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	startCtx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	err = a.Start(startCtx)
	cancel()
	if err != nil {
		code := s.startupFailed(err)
		stopCtx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		_ = a.Stop(stopCtx)
		cancel()
		return code
	}
	return s.runUntilStopped(a, sig)
}

// newMainSettings applies opts over the defaults (the name of os.Args[0],
// contract.Version, os.Args, os.Stdout, os.Stderr, a context that is never
// done).
func newMainSettings(opts []MainOption) *mainSettings {
	s := &mainSettings{name: programName(), version: contract.Version, stdout: os.Stdout, stderr: os.Stderr, ctx: context.Background()}
	for _, o := range opts {
		o(s)
	}
	if !s.argsSet {
		s.args = os.Args[1:]
	}
	if s.stdout == nil {
		s.stdout = os.Stdout
	}
	if s.stderr == nil {
		s.stderr = os.Stderr
	}
	if s.ctx == nil {
		s.ctx = context.Background()
	}
	return s
}

// programName is the base name of os.Args[0], or "mmmq" when there is none.
func programName() string {
	if len(os.Args) == 0 || os.Args[0] == "" {
		return "mmmq"
	}
	return filepath.Base(os.Args[0])
}

// parseFlags reads serve's args: --config; any other argument is a usage
// error (2).
func (s *mainSettings) parseFlags(args []string) (cfgPath string, code int, ok bool) {
	fset := flag.NewFlagSet(s.name+" serve", flag.ContinueOnError)
	cfgFlag := fset.String("config", "", "YAML config file; must exist (default: $MMMQ_CONFIG, else "+
		defaultPathHelp(s.configPath)+")")
	fset.Usage = func() {
		fmt.Fprintf(fset.Output(), "usage: %s [serve] [--config FILE]\n\nflags:\n", s.name)
		fset.PrintDefaults()
	}
	if code, ok := cli.ParseFlags(fset, args, s.stdout, s.stderr); !ok {
		return "", code, false
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(s.stderr, "%s: unexpected argument %q\n", s.name, fset.Arg(0))
		fset.SetOutput(s.stderr)
		fset.Usage()
		return "", 2, false
	}
	return *cfgFlag, 0, true
}

// startupFailed prints err as Main's one startup line and returns 1.
func (s *mainSettings) startupFailed(err error) int {
	fmt.Fprintf(s.stderr, "%s: startup failed: %s\n", s.name, cli.OneLine(err))
	return 1
}

// build loads the configuration (cfgFlag, else $MMMQ_CONFIG, else the
// binary's path, else the built-in default) and builds the application.
func (s *mainSettings) build(cfgFlag string) (*fx.App, error) {
	if s.sectionsErr != nil {
		return nil, s.sectionsErr // what New would report
	}
	cfg, file, err := loadConfig(cfgFlag, s.configPath, s.secs)
	if err != nil {
		return nil, err
	}
	st := config.SectionValue(cfg, topicqueue.StorageSection)
	dataDir, err := filepath.Abs(st.RootDir)
	if err != nil {
		return nil, fmt.Errorf("mmmq.broker.storage.root-dir %q: %w", st.RootDir, err)
	}
	// Fx's events go to the broker's logger once it exists, less those
	// carrying an error: Main reports a failed build, start or stop on one
	// line itself. Until then they are held back, and dropped when the build
	// fails (Fx would otherwise print them all on stderr).
	events := &heldEvents{}
	all := append([]fx.Option{config.Supply(cfg)}, s.modules...)
	all = append(all,
		fx.Invoke(func(log *zap.Logger) {
			events.start(logging.NewFxLogger(log))
			s.log = log.Named("app")
			s.log.Info("configuration", zap.String("config-file", file), zap.String("data-dir", dataDir),
				zap.String("index-sync", st.IndexSync), zap.Duration("index-sync-interval", st.IndexSyncInterval),
				zap.Int64("preallocate", st.Preallocate))
		}),
		// Last, so that it wins over logging.Module's.
		fx.WithLogger(func() fxevent.Logger { return events }),
	)
	a := New(all...)
	return a, a.Err()
}

// runUntilStopped waits for SIGINT/SIGTERM on sig, the application's own
// shutdown or the settings' context, then stops a within StopTimeout: 0, or
// 1 with one line when the stop failed.
func (s *mainSettings) runUntilStopped(a *fx.App, sig <-chan os.Signal) int {
	var why string
	select {
	case sg := <-sig:
		why = "signal " + sg.String()
	case sd := <-a.Done():
		why = "signal " + sd.String()
	case <-s.ctx.Done():
		why = "context done"
	}
	log := s.log
	if log == nil {
		log = zap.NewNop()
	}
	log.Info("stopping", zap.String("reason", why), zap.Duration("stop-timeout", StopTimeout))
	began := time.Now()
	stopCtx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	if err := a.Stop(stopCtx); err != nil {
		log.Error("stop failed", zap.Error(err), zap.Duration("took", time.Since(began)))
		fmt.Fprintf(s.stderr, "%s: stop: %s\n", s.name, cli.OneLine(err))
		return 1
	}
	log.Info("stopped", zap.Duration("took", time.Since(began)))
	_ = logging.Sync(log)
	return 0
}

func defaultPathHelp(authorPath string) string {
	if authorPath != "" {
		return authorPath
	}
	return config.DefaultPath + " when present"
}

// loadConfig resolves the configuration file (see Main) and loads it with
// secs. file is the absolute path of the file read, or NoConfigFile.
func loadConfig(flagPath, authorPath string, secs []config.Section) (cfg *config.Config, file string, err error) {
	path, from := flagPath, "--config"
	if path == "" {
		path, from = os.Getenv(config.EnvConfigVar), "$"+config.EnvConfigVar
	}
	if path == "" {
		path, from = authorPath, "the program (its built-in config path)"
	}
	opts := config.LoadOptions{Path: path, PathExplicit: true, Sections: secs}
	if path == "" {
		// Only the built-in default may be missing. $MMMQ_CONFIG is unset
		// here, so Load reads config.DefaultPath if present.
		if _, serr := os.Stat(config.DefaultPath); serr != nil {
			if !errors.Is(serr, fs.ErrNotExist) {
				return nil, "", fmt.Errorf("config: %s: %w", config.DefaultPath, serr)
			}
			cfg, err := config.Load(config.LoadOptions{Sections: secs})
			return cfg, NoConfigFile, err
		}
		opts.Path, from = config.DefaultPath, "the default path"
	}
	cfg, err = config.Load(opts)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w (config file named by %s)", err, from)
		}
		return nil, "", err
	}
	abs, aerr := filepath.Abs(opts.Path)
	if aerr != nil {
		abs = opts.Path
	}
	return cfg, abs, nil
}

// heldEvents is Main's Fx event logger: it drops the events that carry an
// error and holds the others back until start gives it the broker's logger.
type heldEvents struct {
	mu   sync.Mutex
	next fxevent.Logger
	held []fxevent.Event
}

// start sends the held events, then every later one, to next.
func (h *heldEvents) start(next fxevent.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.held {
		next.LogEvent(e)
	}
	h.next, h.held = next, nil
}

// LogEvent implements fxevent.Logger.
func (h *heldEvents) LogEvent(e fxevent.Event) {
	if eventErr(e) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.next == nil {
		h.held = append(h.held, e)
		return
	}
	h.next.LogEvent(e)
}

// eventErr says whether e reports an error (or a rollback after one).
func eventErr(e fxevent.Event) bool {
	switch e := e.(type) {
	case *fxevent.Provided:
		return e.Err != nil
	case *fxevent.Supplied:
		return e.Err != nil
	case *fxevent.Decorated:
		return e.Err != nil
	case *fxevent.Replaced:
		return e.Err != nil
	case *fxevent.Invoked:
		return e.Err != nil
	case *fxevent.Run:
		return e.Err != nil
	case *fxevent.OnStartExecuted:
		return e.Err != nil
	case *fxevent.OnStopExecuted:
		return e.Err != nil
	case *fxevent.Started:
		return e.Err != nil
	case *fxevent.Stopped:
		return e.Err != nil
	case *fxevent.LoggerInitialized:
		return e.Err != nil
	case *fxevent.RollingBack, *fxevent.RolledBack:
		return true
	}
	return false
}
