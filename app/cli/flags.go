package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"go.uber.org/dig"
)

// ParseFlags parses args with fs and says whether the caller goes on: a
// request for help (-h, -help, --help) prints fs's usage on stdout and
// returns (0, false); a bad flag prints the flag package's message, the
// usage's synopsis line and one line naming the help flag (not the whole
// flag table, which buries the error) on stderr and returns (2, false); otherwise (0, true). fs must have been
// created with flag.ContinueOnError; its output is set to stderr.
func ParseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	var buf strings.Builder
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		io.WriteString(stdout, buf.String())
		return 0, false
	case err != nil:
		msg, rest, _ := strings.Cut(buf.String(), "\n")
		if msg == "" {
			msg = err.Error()
		}
		// The synopsis ("usage: ..."), not the flag table.
		synopsis, _, _ := strings.Cut(strings.TrimSpace(rest), "\n")
		if strings.HasPrefix(strings.ToLower(synopsis), "usage") {
			msg += "\n" + synopsis
		}
		fmt.Fprintf(stderr, "%s\nrun '%s --help' for the flags\n", msg, helpName(fs.Name()))
		return 2, false
	}
	return 0, true
}

// ParseArgs is ParseFlags for commands that also take positional
// arguments: flags may come before, between or after them ("verify DIR
// --repair" sets --repair), and the positional arguments are returned in
// order. "--" ends the flags. Help and flag errors are as for ParseFlags.
func ParseArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (positional []string, code int, ok bool) {
	for {
		if code, ok := ParseFlags(fs, args, stdout, stderr); !ok {
			return nil, code, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, 0, true
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), 0, true
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// OneLine reduces an error, an Fx one included, to its root cause on one
// line: dig's root cause, the members of a joined error separated by "; ",
// newlines replaced by spaces.
func OneLine(err error) string {
	if err == nil {
		return ""
	}
	root := dig.RootCause(err)
	if root == nil {
		root = err
	}
	var parts []string
	if j, ok := root.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 1 {
		for _, e := range j.Unwrap() {
			parts = append(parts, e.Error())
		}
	} else {
		parts = append(parts, root.Error())
	}
	return strings.ReplaceAll(strings.Join(parts, "; "), "\n", " ")
}

// helpName is the command line that shows a flag set's usage: the program
// name, then the command (the flag set's name, when it is not the program's).
func helpName(name string) string {
	if name == "" || name == prog || strings.HasPrefix(name, prog+" ") {
		if name == "" {
			return prog
		}
		return name
	}
	return prog + " " + name
}
