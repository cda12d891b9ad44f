package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/config"
)

// The commands in this file and in dispatchers.go and topics.go talk to a
// running broker over its HTTP API. Exit codes: 0 done; 1 the broker
// answered with an error, could not be reached, or is not an mmmq broker;
// 2 bad usage.

// defaultServerURL is the broker URL when neither --server nor
// $MMMQ_SERVER gives one.
const defaultServerURL = "http://localhost:8080"

// defaultRequestTimeout bounds one request when --request-timeout is not given.
const defaultRequestTimeout = 30 * time.Second

// maxAnswer caps the answer body the commands read (GET /topics of a broker
// with many topics is the largest).
const maxAnswer = 64 << 20

// group is a command with subcommands ("mmmq dispatchers list").
type group struct {
	name  string // "dispatchers"
	about string // what the group is for, under its usage line
	subs  []subcommand
}

// subcommand is one subcommand of a group.
type subcommand struct {
	name     string // "list"
	synopsis string // arguments and flags after "mmmq <group> <name>"
	brief    string // one line for the group's usage
	about    string // the rest of its --help text
	// run adds its own flags to r, parses args with r.parse and runs.
	run func(r *remote, args []string) int
}

// run dispatches args to a subcommand; a missing or unknown one is a usage
// error (exit 2), --help prints the group's usage on stdout.
func (g *group) run(args []string) int {
	// The flags every subcommand takes may come first
	// ("dispatchers --server URL list"): moved behind the subcommand.
	if lead, rest := leadingRemoteFlags(args); len(lead) > 0 {
		if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
			rest = append(append([]string{rest[0]}, lead...), rest[1:]...)
		}
		args = rest
	}
	switch {
	case len(args) > 0 && isHelp(args[0]):
		g.usage(os.Stdout)
		return 0
	case len(args) == 0:
		fmt.Fprintf(os.Stderr, prog+" %s: missing subcommand\n", g.name)
		g.usage(os.Stderr)
		return 2
	case strings.HasPrefix(args[0], "-"):
		fmt.Fprintf(os.Stderr, prog+" %s: want the subcommand before its flags (only --server, --json, --request-timeout and --token-file may come first); got %q\n", g.name, args[0])
		g.usage(os.Stderr)
		return 2
	}
	for _, s := range g.subs {
		if s.name == args[0] {
			r := newRemote(g.name+" "+s.name, s.synopsis, s.brief+"\n\n"+s.about)
			return s.run(r, args[1:])
		}
	}
	fmt.Fprintf(os.Stderr, prog+" %s: unknown subcommand %q\n", g.name, args[0])
	g.usage(os.Stderr)
	return 2
}

// remoteFlags are the flags every remote subcommand takes (newRemote),
// true for those that take a value.
var remoteFlags = map[string]bool{"server": true, "json": false, "request-timeout": true, "token-file": true}

// leadingRemoteFlags splits args into the remote flags at its start
// (-f, --f, --f=v, or --f v for a flag with a value) and the rest, which
// begins at the first argument that is not one of them.
func leadingRemoteFlags(args []string) (lead, rest []string) {
	i := 0
	for i < len(args) {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takesValue, known := remoteFlags[name]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" || !known {
			break
		}
		i++
		if takesValue && !hasValue {
			if i == len(args) {
				return nil, args // a value is missing: leave it to the flag parser
			}
			i++
		}
	}
	return args[:i], args[i:]
}

// usage lists the group's subcommands on w.
func (g *group) usage(w io.Writer) {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: "+prog+" %s <subcommand> [flags]\n\n%s\n\nSubcommands:\n", g.name, g.about)
	for _, s := range g.subs {
		fmt.Fprintf(&b, "  %s %s\n      %s\n", s.name, s.synopsis, s.brief)
	}
	fmt.Fprintf(&b, "\nEvery subcommand takes --server URL (default $%s, else %s), --json\n"+
		"(print the broker's JSON answer, indented), --request-timeout D (default %s) and\n"+
		"--token-file FILE (the bearer token of a broker with authentication on; default $%s).\n"+
		"\""+prog+" %s <subcommand> --help\" describes one.\n\n"+
		"Exit codes: 0 done; 1 the broker answered with an error (its status, code and\n"+
		"message are printed), could not be reached or is not an mmmq broker; 2 bad usage.\n",
		config.EnvServerVar, defaultServerURL, defaultRequestTimeout, config.EnvTokenVar, g.name)
	io.WriteString(w, b.String())
}

// remote is one run of a subcommand against a broker: its flags and the
// client they describe.
type remote struct {
	name string // "dispatchers get"
	fs   *flag.FlagSet

	server    string
	asJSON    bool
	timeout   time.Duration
	tokenFile string
	token     string // read from tokenFile or $MMMQ_TOKEN by parse
}

// newRemote returns the subcommand "mmmq <name>" with the flags every
// remote command takes; the caller adds its own before parse.
func newRemote(name, synopsis, about string) *remote {
	r := &remote{name: name}
	r.fs = flag.NewFlagSet(name, flag.ContinueOnError)
	r.fs.StringVar(&r.server, "server", "", "broker URL (default $"+config.EnvServerVar+", else "+defaultServerURL+")")
	r.fs.BoolVar(&r.asJSON, "json", false, "print the broker's JSON answer, indented, instead of text")
	r.fs.DurationVar(&r.timeout, "request-timeout", defaultRequestTimeout, "give up on a request that takes longer")
	r.fs.StringVar(&r.tokenFile, "token-file", "", "file holding the bearer token for a broker with authentication on (default $"+config.EnvTokenVar+")")
	r.fs.Usage = func() {
		fmt.Fprintf(r.fs.Output(), "usage: "+prog+" %s %s\n\n%s\n\nFlags:\n", name, synopsis, strings.TrimSpace(about))
		r.fs.PrintDefaults()
	}
	return r
}

// parse reads args: the positional arguments must be exactly the ones
// named (flags may come before, between or after them). It returns them,
// or the exit code when the command ends here (help: 0, usage error: 2).
func (r *remote) parse(args []string, names ...string) ([]string, int, bool) {
	pos, code, ok := ParseArgs(r.fs, args, os.Stdout, os.Stderr)
	switch {
	case !ok:
		return nil, code, false
	case len(pos) < len(names):
		return nil, r.usageError("missing %s", names[len(pos)]), false
	case len(pos) > len(names):
		return nil, r.usageError("unexpected argument %q", pos[len(names)]), false
	case r.timeout <= 0:
		return nil, r.usageError("--request-timeout must be > 0"), false
	}
	from := "--server"
	if r.server == "" {
		r.server, from = os.Getenv(config.EnvServerVar), "$"+config.EnvServerVar
	}
	if r.server == "" {
		r.server = defaultServerURL
	}
	base, err := serverURL(r.server)
	if err != nil {
		return nil, r.usageError("%s: %v", from, err), false
	}
	r.server = base
	r.token = os.Getenv(config.EnvTokenVar)
	if r.tokenFile != "" {
		b, err := os.ReadFile(r.tokenFile)
		if err != nil {
			return nil, r.usageError("--token-file: %v", err), false
		}
		r.token = strings.TrimSpace(string(b))
	}
	return pos, 0, true
}

// usageError prints the problem and the subcommand's usage on stderr and
// returns 2.
func (r *remote) usageError(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, prog+" %s: %s\n", r.name, fmt.Sprintf(format, a...))
	r.fs.SetOutput(os.Stderr)
	r.fs.Usage()
	return 2
}

// serverURL checks a --server value and returns it without a trailing
// slash; "host:port" means http://host:port.
func serverURL(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", err
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("want an http:// or https:// URL; got %q", s)
	case u.Host == "":
		return "", fmt.Errorf("no host in %q", s)
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("want the broker's base URL, without a query; got %q", s)
	}
	return strings.TrimRight(s, "/"), nil
}

// brokerError is an error answer of the broker: its HTTP status and the
// "code" and "error" of its body.
type brokerError struct {
	Status int
	Code   string
	Msg    string
}

func (e *brokerError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Msg) }

// client sends the requests of one command to the broker at base.
type client struct {
	base    string
	timeout time.Duration
	token   string // bearer token; "" sends none
	hc      *http.Client
}

func (r *remote) client() *client {
	return &client{base: r.server, timeout: r.timeout, token: r.token, hc: &http.Client{
		Timeout: r.timeout,
		// A redirect is not an mmmq answer: shown as such, never followed
		// (a followed POST would turn into a GET).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// do sends method path (path escaped by the caller) with the JSON body
// (nil: none) and returns the 2xx answer, a JSON object. Errors: a
// *brokerError for the broker's error answers; otherwise a message naming
// the server (unreachable, timed out, or an answer that is not mmmq's).
func (c *client) do(method, path string, body []byte) (json.RawMessage, error) {
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "mmmq/"+version)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportError(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, c.transportError(err)
	}
	if len(raw) > maxAnswer {
		return nil, fmt.Errorf("the answer of %s %s is over %d bytes", method, c.base+path, maxAnswer)
	}
	var eb struct {
		Error *string `json:"error"`
		Code  string  `json:"code"`
	}
	isObject := json.Valid(raw) && bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{"))
	switch {
	case !isObject:
		return nil, c.notBroker(method, path, resp, raw)
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return raw, nil
	case json.Unmarshal(raw, &eb) != nil || eb.Error == nil || eb.Code == "":
		return nil, c.notBroker(method, path, resp, raw)
	}
	return nil, &brokerError{Status: resp.StatusCode, Code: eb.Code, Msg: *eb.Error}
}

// transportError says why no answer came from the server.
func (c *client) transportError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("no answer from the broker at %s within %s (--request-timeout)", c.base, c.timeout)
		}
		err = ue.Err
	}
	return fmt.Errorf("cannot reach the broker at %s: %v", c.base, err)
}

// notBroker describes an answer that is not the JSON an mmmq broker sends.
func (c *client) notBroker(method, path string, resp *http.Response, raw []byte) error {
	snippet := []rune(strings.Join(strings.Fields(string(raw)), " "))
	if len(snippet) > 60 {
		snippet = append(snippet[:60], []rune("...")...)
	}
	what := "an empty body"
	if len(snippet) > 0 {
		what = fmt.Sprintf("%q", string(snippet))
		if ct := resp.Header.Get("Content-Type"); ct != "" {
			what += " (" + ct + ")"
		}
	}
	return fmt.Errorf("%s %s answered %s with %s, not an mmmq answer: is %s an mmmq broker? (--server, $%s)",
		method, c.base+path, resp.Status, what, c.base, config.EnvServerVar)
}

// decode reads an answer of the broker into v.
func (c *client) decode(raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("unexpected answer from %s (an mmmq broker of another version?): %v", c.base, err)
	}
	return nil
}
