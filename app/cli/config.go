package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/auth"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/servertls"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/webhooks"
	"github.com/mmmq/mmmq/plugins/configdispatchers"
)

const configUsage = `usage: mmmq config check [--config FILE]

Loads and validates the configuration exactly as "mmmq serve" would (same
file resolution: --config, else $MMMQ_CONFIG, else configs/mmmq.yaml when
present; same environment; same plugin sections; the dispatchers of
mmmq.broker.dispatchers built as serve builds them) and prints every key's
effective value and source (default, the file, or the MMMQ_ variable), the
ignored Kubernetes service-link variables and the warnings. Secrets are
never printed: a dispatcher's signing-secrets show as their redacted form
(with the key's fingerprint), its headers with every value "(redacted)".

Exit codes: 0 valid; 1 invalid (one line on stderr, "mmmq config check:
FILE: " and the reason serve gives after "startup failed:"); 2 bad usage.

Flags:
  --config FILE   YAML config file (default configs/mmmq.yaml when present)
`

// configShortUsage is printed on stderr after a usage error.
const configShortUsage = "usage: mmmq config check [--config FILE]   (mmmq config check --help for more)\n"

// configCmd runs `mmmq config <subcommand> ...`; the one subcommand is check.
func configCmd(args []string) int {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Print(named(configUsage))
		return 0
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, prog+" config: missing subcommand (check)")
		fmt.Fprint(os.Stderr, named(configShortUsage))
		return 2
	}
	if args[0] != "check" {
		fmt.Fprintf(os.Stderr, prog+" config: unknown subcommand %q (want check)\n", args[0])
		fmt.Fprint(os.Stderr, named(configShortUsage))
		return 2
	}
	return configCheck(args[1:])
}

func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "-help" || arg == "--help"
}

// configCheck is `mmmq config check [--config FILE]`.
func configCheck(args []string) int {
	fs := flag.NewFlagSet("config check", flag.ContinueOnError)
	fs.SetOutput(os.Stderr) // parse errors; --help goes to stdout below
	fs.Usage = func() {}
	cfgPath := fs.String("config", "", "YAML config file (default configs/mmmq.yaml when present)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Print(named(configUsage))
			return 0
		}
		fmt.Fprint(os.Stderr, named(configShortUsage))
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, prog+" config check: unexpected argument %q\n", fs.Arg(0))
		fmt.Fprint(os.Stderr, named(configShortUsage))
		return 2
	}
	// The options serve passes to config.Load.
	opts := loadOptions(*cfgPath)
	// An invalid configuration is a check result, "<prog> config check:
	// <file>: <what serve would say after 'startup failed:'>".
	invalid := prog + " config check: " + checkedFile(opts) + ":"
	eff, err := config.LoadEffective(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, invalid, OneLine(err))
		return 1
	}
	// What serve checks against this process's open-file limit, too.
	limit, _ := contract.OpenFileLimit()
	if err := storage.CheckMaxOpenSegments(config.SectionValue(eff.Config, topicqueue.StorageSection).MaxOpenSegments, limit); err != nil {
		fmt.Fprintln(os.Stderr, invalid, err)
		return 1
	}
	// What serve's configdispatchers plugin builds: ack-mode, headers,
	// signing secrets, the dead-letter topic and the other delivery
	// settings are checked there, not by config.Load.
	if _, err := configdispatchers.Build(config.SectionValue(eff.Config, configdispatchers.Section)); err != nil {
		fmt.Fprintln(os.Stderr, invalid, OneLine(err))
		return 1
	}
	// The files serve reads at startup: token files and the TLS
	// certificates, keys and client CAs.
	if _, err := auth.New(config.SectionValue(eff.Config, auth.ConfigSection), nil, nil); err != nil {
		fmt.Fprintln(os.Stderr, invalid, OneLine(err))
		return 1
	}
	if _, err := servertls.New(eff.Config.Server.TLS, "http"); err != nil {
		fmt.Fprintln(os.Stderr, invalid, OneLine(err))
		return 1
	}
	var notes []string
	if n := config.SectionValue(eff.Config, topicqueue.StorageSection).MaxOpenSegments; n <= 0 {
		notes = append(notes, fmt.Sprintf("mmmq.broker.storage.max-open-segments 0 means %d here (a quarter of the open-file limit %d)",
			storage.AutoMaxOpenSegments(limit), limit))
	}
	if err := printEffective(os.Stdout, eff, notes); err != nil {
		fmt.Fprintln(os.Stderr, prog+" config check:", err)
		return 1
	}
	return 0
}

// checkedFile names the configuration file config check reads for opts,
// as given, or "(no file)" when it reads none (built-in defaults and the
// environment only).
func checkedFile(opts config.LoadOptions) string {
	if f := config.FileOf(opts); f != "" {
		return f
	}
	return "(no file)"
}

// printEffective writes the file line, a KEY VALUE SOURCE table, one line
// per ignored variable, per warning and per note (values decided at start,
// such as an automatic setting), and "configuration OK".
func printEffective(w io.Writer, eff *config.Effective, notes []string) error {
	var b strings.Builder
	if eff.File != "" {
		fmt.Fprintf(&b, "file: %s\n", eff.File)
	} else {
		fmt.Fprintf(&b, "file: none (no --config, $%s unset, %s absent)\n", config.EnvConfigVar, config.DefaultPath)
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	values := map[string]string{}
	for _, s := range eff.Settings {
		values[s.Key] = formatValue(reflect.ValueOf(redact(s.Key, s.Value)))
	}
	for _, s := range eff.Settings {
		v := values[s.Key]
		if m := overrideLimit.FindStringSubmatch(s.Key); m != nil && v == "inherited" {
			v += ":" + values["mmmq.broker.retention."+m[1]] // the value it inherits
		}
		if m := deadLetterKey.FindStringSubmatch(s.Key); m != nil && v == "inherited" {
			// Absent: the default topic, named after the dispatcher.
			v = strconv.Quote(dispatcher.DeadLetterPrefix + strings.Trim(values[m[1]+".name"], `"`))
		}
		v = effectiveZero(s.Key, v)
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Key, v, s.Source())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, name := range eff.Config.IgnoredVars {
		fmt.Fprintf(&b, "ignored: %s (a Kubernetes service link; names no key)\n", name)
	}
	for _, wn := range eff.Config.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", wn)
	}
	for _, n := range notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	b.WriteString("configuration OK\n")
	_, err := io.WriteString(w, b.String())
	return err
}

var durationType = reflect.TypeFor[time.Duration]()

// zeroMeans are the keys whose zero value stands for another one, and
// what config check shows instead: the value in effect (a permission
// without topics grants every topic, "**").
var zeroMeans = []struct {
	key        *regexp.Regexp
	zero, mean string
}{
	{regexp.MustCompile(`^mmmq\.auth\.tokens\[\d+\]\.permissions\[\d+\]\.topics$`), "[]", `["**"]`},
	{regexp.MustCompile(`^mmmq\.auth\.tokens\[\d+\]\.permissions\[\d+\]\.groups$`), "[]", `["*"]`},
	{regexp.MustCompile(`^mmmq\.broker\.dispatchers\[\d+\]\.max-in-flight$`), "0", "1"},
	{regexp.MustCompile(`^mmmq\.broker\.dispatchers\[\d+\]\.ack-mode$`), `""`, strconv.Quote(string(dispatcher.AckBody))},
	{regexp.MustCompile(`^mmmq\.broker\.dispatchers\[\d+\]\.start$`), `""`, strconv.Quote(dispatcher.StartEarliest)},
}

// effectiveZero returns v, or, for a key of zeroMeans at its zero value,
// the value in effect.
func effectiveZero(key, v string) string {
	for _, z := range zeroMeans {
		if v == z.zero && z.key.MatchString(key) {
			return z.mean
		}
	}
	return v
}

// overrideLimit matches a retention override's limit key; a limit the
// override leaves out is shown with the broker-wide value it inherits.
var overrideLimit = regexp.MustCompile(`^mmmq\.broker\.retention\.topics\[\d+\]\.(max-age|max-bytes)$`)

// deadLetterKey matches a dispatcher's dead-letter key; absent, it is
// shown as the default topic. The submatch is the dispatcher's key.
var deadLetterKey = regexp.MustCompile(`^(mmmq\.broker\.dispatchers\[\d+\])\.dead-letter$`)

// secretKey matches the keys whose values are secrets: a dispatcher's
// signing secrets, signing keys and headers, the JetStream password and
// token, the tracing exporter's headers.
var secretKey = regexp.MustCompile(`^(mmmq\.broker\.dispatchers\[\d+\]\.(signing-secrets|signing-keys|headers)|mmmq\.jetstream\.(password|token)|mmmq\.tracing\.headers)$`)

// redact returns the value of key to print: a dispatcher's signing secrets
// and keys in their redacted form (webhooks.Secret's String, with the
// fingerprint of the key; webhooks.SigningKey's, with its kid), its headers with every value admin.RedactedValue, a password
// or token as admin.RedactedValue when set; any other key's value as it is.
func redact(key string, v any) any {
	if !secretKey.MatchString(key) {
		return v
	}
	switch x := v.(type) {
	case string:
		if x == "" {
			return x
		}
		return admin.RedactedValue
	case []string:
		out := make([]string, len(x))
		for i, s := range x {
			out[i] = admin.RedactedValue
			if sec, err := webhooks.ParseSecret(s); err == nil {
				out[i] = sec.String()
			} else if k, err := webhooks.ParseSigningKey(s); err == nil {
				out[i] = k.String()
			}
		}
		return out
	case map[string]string:
		out := make(map[string]string, len(x))
		for name := range x {
			out[name] = admin.RedactedValue
		}
		return out
	}
	return admin.RedactedValue
}

// formatValue shows a setting's value as in the YAML file: strings quoted,
// durations with their unit ("30s"), lists in brackets, mappings in braces
// sorted by key; an optional value left out (a nil pointer: a retention
// override's limit) is "inherited".
func formatValue(v reflect.Value) string {
	switch {
	case !v.IsValid():
		return "null"
	case v.Kind() == reflect.Pointer && v.IsNil():
		return "inherited"
	case v.Kind() == reflect.Pointer:
		return formatValue(v.Elem())
	case v.Type() == durationType:
		return time.Duration(v.Int()).String()
	case v.Kind() == reflect.String:
		return strconv.Quote(v.String())
	case v.Kind() == reflect.Slice:
		parts := make([]string, v.Len())
		for i := range v.Len() {
			parts[i] = formatValue(v.Index(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case v.Kind() == reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprint(k) + ": " + formatValue(v.MapIndex(k))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v.Interface())
}
