package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/v2"
)

// PluginKey is one key of a stock plugin or module (one shipped in this
// repository's plugins/ or modules/ directory whose package owns the
// section, e.g. mmmq.broker.dispatch of modules/dispatcher), known to the
// loader even when the binary does not contain it, so that
// configs/mmmq.yaml works for a custom binary (one built with
// app.Without(app.Dispatcher), say).
type PluginKey struct {
	// Key is the full key, e.g. "mmmq.profiling.addr".
	Key string
	// Plugin is the import path of the plugin or module that reads it.
	Plugin string
	// Default is the documented default, typed as the plugin's field
	// (string, bool, int64, time.Duration); []any(nil), the empty list,
	// for a list.
	Default any
	// Secret says the value is a credential (a password, a token): an
	// error never shows it.
	Secret bool
}

// kind is "module" or "plugin", as the package's folder says.
func (p PluginKey) kind() string {
	if strings.Contains(p.Plugin, "/modules/") {
		return "module"
	}
	return "plugin"
}

// in says whether the key belongs to sec (lies under sec's key, or is a
// list section's own key).
func (p PluginKey) in(sec Section) bool {
	return strings.HasPrefix(p.Key, sec.Key()+".") || p.Key == sec.Key()
}

// stockPluginKeys is the one list of the stock plugins' and modules' section
// keys and documented defaults. A test in package app checks it against
// their sections.
var stockPluginKeys = []PluginKey{
	{Key: "mmmq.broker.dispatch.timeout", Plugin: "github.com/mmmq/mmmq/modules/dispatcher", Default: 30 * time.Second},
	{Key: "mmmq.broker.dispatch.max-resends", Plugin: "github.com/mmmq/mmmq/modules/dispatcher", Default: 3},
	{Key: "mmmq.broker.dispatch.backoff-initial", Plugin: "github.com/mmmq/mmmq/modules/dispatcher", Default: time.Second},
	{Key: "mmmq.broker.dispatch.backoff-max", Plugin: "github.com/mmmq/mmmq/modules/dispatcher", Default: 60 * time.Second},
	{Key: "mmmq.broker.dispatch.max-response-bytes", Plugin: "github.com/mmmq/mmmq/modules/dispatcher", Default: int64(64 << 10)},
	{Key: "mmmq.broker.dispatch.path", Plugin: "github.com/mmmq/mmmq/modules/dispatcher", Default: "/mmmq/messages"},
	{Key: dispatchersKey, Plugin: "github.com/mmmq/mmmq/plugins/configdispatchers", Default: []any(nil)},
	{Key: "mmmq.broker.schedule.max-delay", Plugin: "github.com/mmmq/mmmq/modules/schedule", Default: 720 * time.Hour},
	{Key: "mmmq.broker.schedule.max-pending-per-topic", Plugin: "github.com/mmmq/mmmq/modules/schedule", Default: 1000000},
	{Key: "mmmq.broker.schedule.bucket-width", Plugin: "github.com/mmmq/mmmq/modules/schedule", Default: time.Minute},
	{Key: "mmmq.broker.schedule.move-batch", Plugin: "github.com/mmmq/mmmq/modules/schedule", Default: 1000},
	{Key: "mmmq.broker.schedule.memory-budget", Plugin: "github.com/mmmq/mmmq/modules/schedule", Default: int64(67108864)},
	{Key: "mmmq.broker.groups.lease-timeout", Plugin: "github.com/mmmq/mmmq/modules/groups", Default: 30 * time.Second},
	{Key: "mmmq.broker.groups.max-fetch", Plugin: "github.com/mmmq/mmmq/modules/groups", Default: 1000},
	{Key: "mmmq.broker.groups.shared", Plugin: "github.com/mmmq/mmmq/modules/groups", Default: []any(nil)},
	{Key: "mmmq.broker.groups.max-deliveries", Plugin: "github.com/mmmq/mmmq/modules/groups", Default: 4},
	{Key: "mmmq.broker.groups.max-unacked", Plugin: "github.com/mmmq/mmmq/modules/groups", Default: int64(1000000)},
	{Key: "mmmq.broker.groups.expired", Plugin: "github.com/mmmq/mmmq/modules/groups", Default: "skip"},
	{Key: "mmmq.broker.groups.dead-letter-topics", Plugin: "github.com/mmmq/mmmq/modules/groups", Default: []any(nil)},
	{Key: "mmmq.broker.storage.backend", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: "local"},
	{Key: "mmmq.broker.storage.root-dir", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: "./data"},
	{Key: "mmmq.broker.storage.on-corruption", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: "fail"},
	{Key: "mmmq.broker.storage.max-topics", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: 10000},
	{Key: "mmmq.broker.storage.max-open-segments", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: 0},
	{Key: "mmmq.broker.storage.min-free-bytes", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: int64(256 << 20)},
	{Key: "mmmq.broker.storage.index-sync", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: "commit"},
	{Key: "mmmq.broker.storage.index-sync-interval", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: time.Second},
	{Key: "mmmq.broker.storage.preallocate", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: int64(4 << 20)},
	{Key: "mmmq.broker.storage.preallocate-max-bytes", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: int64(256 << 20)},
	{Key: "mmmq.broker.segment.max-bytes", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: int64(64 << 20)},
	{Key: "mmmq.broker.segment.max-record-bytes", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: int64(1 << 20)},
	{Key: "mmmq.broker.memory.max-inflight-bytes", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: int64(256 << 20)},
	{Key: "mmmq.broker.dedup.window", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: 2 * time.Minute},
	{Key: "mmmq.broker.dedup.max-ids", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: 100000},
	{Key: "mmmq.broker.dedup.max-bytes", Plugin: "github.com/mmmq/mmmq/modules/topicqueue", Default: int64(64 << 20)},
	{Key: "mmmq.broker.retention.max-age", Plugin: "github.com/mmmq/mmmq/modules/retention", Default: time.Duration(0)},
	{Key: "mmmq.broker.retention.max-bytes", Plugin: "github.com/mmmq/mmmq/modules/retention", Default: int64(0)},
	{Key: "mmmq.broker.retention.check-interval", Plugin: "github.com/mmmq/mmmq/modules/retention", Default: time.Minute},
	{Key: "mmmq.broker.retention.keep-unconsumed", Plugin: "github.com/mmmq/mmmq/modules/retention", Default: false},
	{Key: "mmmq.broker.retention.group-idle", Plugin: "github.com/mmmq/mmmq/modules/retention", Default: 24 * time.Hour},
	{Key: "mmmq.broker.retention.topics", Plugin: "github.com/mmmq/mmmq/modules/retention", Default: []any(nil)},
	{Key: "mmmq.admin.allowed-hosts", Plugin: "github.com/mmmq/mmmq/modules/admin", Default: []any(nil)},
	{Key: "mmmq.webhooks.public-keys-open", Plugin: "github.com/mmmq/mmmq/modules/admin", Default: false},
	{Key: authTokensKey, Plugin: "github.com/mmmq/mmmq/modules/auth", Default: []any(nil)},
	{Key: "mmmq.auth.protect-metrics", Plugin: "github.com/mmmq/mmmq/modules/auth", Default: true},
	{Key: "mmmq.jetstream.servers", Plugin: "github.com/mmmq/mmmq/plugins/jetstream", Default: "nats://127.0.0.1:4222"},
	{Key: "mmmq.jetstream.replicas", Plugin: "github.com/mmmq/mmmq/plugins/jetstream", Default: int64(3)},
	{Key: "mmmq.jetstream.stream-prefix", Plugin: "github.com/mmmq/mmmq/plugins/jetstream", Default: "mmmq"},
	{Key: "mmmq.jetstream.creds-file", Plugin: "github.com/mmmq/mmmq/plugins/jetstream", Default: ""},
	{Key: "mmmq.jetstream.user", Plugin: "github.com/mmmq/mmmq/plugins/jetstream", Default: ""},
	{Key: "mmmq.jetstream.password", Plugin: "github.com/mmmq/mmmq/plugins/jetstream", Default: "", Secret: true},
	{Key: "mmmq.jetstream.token", Plugin: "github.com/mmmq/mmmq/plugins/jetstream", Default: "", Secret: true},
	{Key: "mmmq.jetstream.tls.ca-file", Plugin: "github.com/mmmq/mmmq/plugins/jetstream", Default: ""},
	{Key: "mmmq.jetstream.tls.cert-file", Plugin: "github.com/mmmq/mmmq/plugins/jetstream", Default: ""},
	{Key: "mmmq.jetstream.tls.key-file", Plugin: "github.com/mmmq/mmmq/plugins/jetstream", Default: ""},
	{Key: "mmmq.jetstream.connect-timeout", Plugin: "github.com/mmmq/mmmq/plugins/jetstream", Default: 5 * time.Second},
	{Key: "mmmq.jetstream.request-timeout", Plugin: "github.com/mmmq/mmmq/plugins/jetstream", Default: 5 * time.Second},
	{Key: "mmmq.jetstream.lease-timeout", Plugin: "github.com/mmmq/mmmq/plugins/jetstream", Default: 10 * time.Second},
	{Key: "mmmq.lineproto.addr", Plugin: "github.com/mmmq/mmmq/plugins/lineproto", Default: ""},
	{Key: "mmmq.lineproto.max-line-bytes", Plugin: "github.com/mmmq/mmmq/plugins/lineproto", Default: int64(1<<20 + 64<<10)},
	{Key: "mmmq.lineproto.max-pipeline", Plugin: "github.com/mmmq/mmmq/plugins/lineproto", Default: int64(128)},
	{Key: "mmmq.tracing.exporter", Plugin: "github.com/mmmq/mmmq/modules/tracing", Default: "none"},
	{Key: "mmmq.tracing.endpoint", Plugin: "github.com/mmmq/mmmq/modules/tracing", Default: ""},
	{Key: "mmmq.tracing.sampling-ratio", Plugin: "github.com/mmmq/mmmq/modules/tracing", Default: float64(1)},
	{Key: "mmmq.tracing.service-name", Plugin: "github.com/mmmq/mmmq/modules/tracing", Default: "mmmq"},
	{Key: "mmmq.tracing.insecure", Plugin: "github.com/mmmq/mmmq/modules/tracing", Default: false},
	{Key: "mmmq.tracing.queue-size", Plugin: "github.com/mmmq/mmmq/modules/tracing", Default: 8192},
	{Key: "mmmq.metrics.enabled", Plugin: "github.com/mmmq/mmmq/plugins/metrics", Default: true},
	{Key: "mmmq.ui.enabled", Plugin: "github.com/mmmq/mmmq/plugins/ui", Default: true},
	{Key: "mmmq.ui.refresh", Plugin: "github.com/mmmq/mmmq/plugins/ui", Default: 2 * time.Second},
	{Key: "mmmq.ui.topics-per-page", Plugin: "github.com/mmmq/mmmq/plugins/ui", Default: 100},
	{Key: "mmmq.ui.messages", Plugin: "github.com/mmmq/mmmq/plugins/ui", Default: 20},
	{Key: "mmmq.profiling.addr", Plugin: "github.com/mmmq/mmmq/plugins/profiling", Default: ""},
}

// StockPluginKeys returns the keys of the sections of the stock modules
// (dispatcher, groups, schedule, topicqueue's storage, segment, memory and dedup, retention, admin and its webhooks, auth, tracing) and plugins
// (configdispatchers, jetstream, lineproto, metrics, ui, profiling) with their documented defaults, in a new slice. Load treats such
// a key, when no registered Section has its name, as follows: a value equal
// to the default gives a [Warning]; any other value is an error wrapping
// [ErrPluginMissing] that names the key and the plugin.
func StockPluginKeys() []PluginKey {
	out := make([]PluginKey, len(stockPluginKeys))
	copy(out, stockPluginKeys)
	return out
}

// absentStockKeys returns the stock keys whose plugin section is not among secs.
func absentStockKeys(secs []Section) []PluginKey {
	var out []PluginKey
	for _, p := range stockPluginKeys {
		if !slices.ContainsFunc(secs, p.in) {
			out = append(out, p)
		}
	}
	return out
}

// Warning is a configuration problem that does not stop startup: a key of a
// stock plugin the binary does not contain, set to its documented default.
type Warning struct {
	// Key is the full key, e.g. "mmmq.profiling.addr".
	Key string
	// Var is the environment variable that set it, or "" for the file.
	Var string
	// Plugin is the import path of the plugin or module that would read it.
	Plugin string
}

// String returns e.g. `config: mmmq.profiling.addr is ignored: this binary
// does not contain plugin github.com/mmmq/mmmq/plugins/profiling, which reads
// it (the value is its default)`, with " (from MMMQ_...)" when set by a variable.
func (w Warning) String() string {
	s := "config: " + w.Key + " is ignored: this binary does not contain " +
		PluginKey{Plugin: w.Plugin}.kind() + " " + w.Plugin + ", which reads it (the value is its default)"
	if w.Var != "" {
		s += " (from " + w.Var + ")"
	}
	return s
}

// checkAbsentPlugins compares every set key of an absent stock plugin with
// its documented default: equal gives a Warning, different an error.
func checkAbsentPlugins(k *koanf.Koanf, absent []PluginKey, fromEnv map[string]string) ([]Warning, []error) {
	var warns []Warning
	var errs []error
	for _, p := range absent {
		if !k.Exists(p.Key) {
			continue
		}
		raw := k.Get(p.Key)
		if l, isList := raw.([]any); raw == nil || isList && len(l) == 0 || sameValue(raw, p.Default) {
			warns = append(warns, Warning{Key: p.Key, Var: fromEnv[p.Key], Plugin: p.Plugin})
			continue
		}
		got := showValue(raw)
		switch l, isList := raw.([]any); {
		case isList:
			got = fmt.Sprintf("a list of %d", len(l)) // entries may hold secrets
		case p.Secret:
			got = "a value, not shown"
		}
		errs = append(errs, &KeyError{
			Key: p.Key, Var: fromEnv[p.Key], kind: ErrPluginMissing,
			Problem: fmt.Sprintf("is read by %s %s, which this binary does not contain; "+
				"remove the key or set it to its default %s (got %s)", p.kind(), p.Plugin, showValue(p.Default), got),
		})
	}
	return warns, errs
}

// sameValue decodes raw (a file or environment value) as def's type, with the
// loader's rules, and compares.
func sameValue(raw, def any) bool {
	t := reflect.TypeOf(def)
	out := reflect.New(t)
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:     out.Interface(),
		DecodeHook: mapstructure.ComposeDecodeHookFunc(durationHook, integerHook),
	})
	if err != nil || dec.Decode(raw) != nil {
		return false
	}
	return reflect.DeepEqual(out.Elem().Interface(), def)
}

func showValue(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case time.Duration:
		return x.String()
	}
	return fmt.Sprint(v)
}
