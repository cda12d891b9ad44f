// Package cli holds the operator commands of every mmmq binary, the stock
// mmmq and a custom one built with app.Main alike:
//
//	NAME [serve] [--config FILE]        run the broker (default command)
//	NAME config check [--config FILE]   validate the configuration as serve would; print it with sources
//	NAME verify [--root DIR] [--repair] [--json]  offline check of every topic; exit 3 on corruption
//	NAME dump --topic T [--root DIR] [--from N] [--count K]
//	NAME dispatchers list|get|create|update|delete|pause|resume|seek|redrive ...   a running broker's dispatchers
//	NAME topics list|get|scheduled NAME                                  a running broker's topics, groups, scheduled messages
//	NAME token new                      print a fresh bearer token and its token-sha256
//	NAME bench ...                      the load tool (app/loadgen)
//	NAME version
//
// NAME is the binary's own name (Program.Name). serve is not here: the
// caller passes it (Program.Serve), so that this package does not import
// app, which calls Run from app.Main.
//
// Exit codes: 0 clean stop or all OK; 1 startup or runtime failure, or an
// invalid configuration (one line on stderr says why), or, for dispatchers
// and topics, an error answer of the broker or a broker that cannot be
// reached; 2 bad usage; 3 corruption found (verify, dump).
package cli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/mmmq/mmmq/app/loadgen"
	"github.com/mmmq/mmmq/modules/config"
)

// Program is the binary the commands run in; app.Main builds it from its
// options.
type Program struct {
	// Name is the program name the usage, the error lines and version
	// print, e.g. "mmmq" or "orders-broker". Empty means "mmmq".
	Name string
	// Version is what version prints after Name, e.g. "v1.2.0" or "dev".
	Version string
	// Serve runs the broker with the arguments of serve (all of them when
	// the first is a flag, as in "NAME --config FILE") and returns the exit
	// code. nil: serve is an unknown command.
	Serve func(args []string) int
	// Sections are the configuration sections of the plugins in the
	// binary, those serve loads with: config check, verify and dump load
	// the configuration with the same ones, so they accept (and check) the
	// same keys.
	Sections []config.Section
	// ConfigPath is the binary's own configuration file (app.WithConfigPath),
	// read when neither --config nor $MMMQ_CONFIG names one; it must
	// exist. Empty: config.DefaultPath when present.
	ConfigPath string
	// Stdout and Stderr receive Run's own lines (the command list, an
	// unknown command, version); nil means os.Stdout or os.Stderr. The
	// commands themselves write to os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
}

// The Program of the running command, set by Run: the commands print prog
// and version and load the configuration with loadOptions. A process runs
// one command at a time; Run is not meant for concurrent use.
var (
	prog     = "mmmq"
	version  = "dev"
	progSecs []config.Section
	progPath string
)

// loadOptions are the options serve loads the configuration with, for
// the file flagPath (--config; "" for none): the binary's sections, and its
// own file when neither --config nor $MMMQ_CONFIG names one.
func loadOptions(flagPath string) config.LoadOptions {
	if flagPath == "" && os.Getenv(config.EnvConfigVar) == "" && progPath != "" {
		flagPath = progPath
	}
	return config.LoadOptions{Path: flagPath, PathExplicit: flagPath != "", Sections: progSecs}
}

// Run runs the command named by args[0] (args without the program name)
// and returns the exit code: serve when args is empty or starts with a
// flag, the command list on stdout for -h, --help or help, exit 2 and the
// list on stderr for an unknown command.
func Run(p Program, args []string) int {
	stdout, stderr := p.Stdout, p.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	prog, version, progSecs, progPath = p.Name, p.Version, p.Sections, p.ConfigPath
	if prog == "" {
		prog = "mmmq"
	}
	if version == "" {
		version = "dev"
	}
	cmd := "serve"
	switch {
	case len(args) > 0 && isHelp(args[0]):
		cmd, args = "help", args[1:]
	case len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-':
		cmd, args = args[0], args[1:]
	default:
		// "mmmq --server URL dispatchers list": the remote commands'
		// common flags may come before the command too.
		if lead, rest := leadingRemoteFlags(slices.Clone(args)); len(lead) > 0 && len(rest) > 0 && (rest[0] == "dispatchers" || rest[0] == "topics") {
			cmd, args = rest[0], slices.Concat(lead, rest[1:]) // a copy: lead and rest share args
		}
	}
	switch cmd {
	case "serve":
		if p.Serve != nil {
			return p.Serve(args)
		}
	case "config":
		return configCmd(args)
	case "verify":
		return verify(args)
	case "dump":
		return dump(args)
	case "dispatchers":
		return dispatchers(args)
	case "topics":
		return topics(args)
	case "token":
		return tokenCmd(args)
	case "bench":
		return loadgen.Main(args)
	case "version":
		if len(args) > 0 && isHelp(args[0]) {
			fmt.Fprintf(stdout, "usage: %s version\n", prog)
			return 0
		}
		if len(args) > 0 {
			fmt.Fprintf(stderr, "%s version: takes no arguments, got %q\n", prog, args[0])
			return 2
		}
		fmt.Fprintln(stdout, prog, version)
		return 0
	case "help":
		usage(stdout, p.Serve != nil)
		return 0
	}
	fmt.Fprintf(stderr, "%s: unknown command %q\n", prog, cmd)
	usage(stderr, p.Serve != nil)
	return 2
}

// usage prints the commands to w: stdout when asked for, stderr after a
// usage error. serve is listed when the program has it.
func usage(w io.Writer, serve bool) {
	pad := func(s string) string { return s + strings.Repeat(" ", max(1, 38-len(s))) }
	var b strings.Builder
	b.WriteString("usage:\n")
	if serve {
		b.WriteString("  " + pad(prog+" [serve] [--config FILE]") + "run the broker (default: configs/mmmq.yaml if present)\n")
	}
	fmt.Fprintf(&b, `  %svalidate the configuration as serve would; print each key and its source
  %s [--root DIR] [--repair] [--json]
                                        check every entry and CRC offline; exit 3 on corruption
  %s dump --topic T [--root DIR] [--from N] [--count K]

Against a running broker (--server URL, default $MMMQ_SERVER, else http://localhost:8080):
  %sthe dispatchers; one with its progress per topic
  %sadd or change one (flags or --file FILE)
  %s dispatchers delete NAME [--delete-checkpoints]
  %s dispatchers pause|resume NAME
  %s dispatchers seek NAME --to earliest|latest|OFFSET|TIME|ts:MS [--topic PATTERN] [--rate N]
  %s dispatchers redrive NAME [--from N] [--to N] [--rate N]
                                        publish its dead letters to their topics again
  %sthe topics; one with its consumer groups
                                        (%s dispatchers --help, %s topics --help)

  %sprint a fresh bearer token and its token-sha256 (mmmq.auth.tokens)
  %s bench [-mode publish|line|redis|plain|plain-server|deliver] [-url URL | -addr HOST:PORT] [-c N] [-depth D] ...
                                        load tool: HTTP, line protocol, Redis XADD (%s bench -h)
  %s version
`, pad(prog+" config check [--config FILE]"), prog+" verify", prog,
		pad(prog+" dispatchers list|get NAME"), pad(prog+" dispatchers create --name NAME | update NAME"), prog, prog, prog, prog,
		pad(prog+" topics list|get|scheduled NAME"), prog, prog,
		pad(prog+" token new"), prog, prog, prog)
	io.WriteString(w, b.String())
}

// named returns a usage text written for the stock binary with every
// "mmmq " (the program name before a command) replaced by prog's. Only
// for texts where "mmmq " always names the program.
func named(text string) string {
	return strings.ReplaceAll(text, "mmmq ", prog+" ")
}
