// Package configdispatchers contributes the Dispatchers declared in the
// configuration (mmmq.broker.dispatchers) to the `group:"dispatchers"` value
// group, so simple setups need no Go code:
//
//	mmmq:
//	  broker:
//	    dispatchers:
//	      - name: order-dispatcher
//	        host: http://localhost:8081      # scheme://address:port only
//	        patterns: ["order.**", "payment.*"]
//	        path: /mmmq/messages             # optional
//	        timeout: 30s                     # optional, per attempt
//	        commit: {policy: every-message}  # or {policy: interval, interval: 1s, max-count: 1000}
//	        dead-letter: parked.orders       # optional; default dead-letter.<name>, "" = log and skip
//	        ack-mode: status                 # optional; body (default) | status
//	        max-in-flight: 8                 # optional; default 1
//	        adaptive-concurrency: aimd       # optional; off (default) | aimd: 1..max-in-flight outstanding, adapted
//	        batch: {max-messages: 100}       # optional; default off
//
// The other delivery keys (max-abnormal-attempts, max-abnormal-duration,
// backoff-jitter, signing-secrets, signing-keys, headers, cloudevents, rate limit,
// circuit breaker, pause-after ...) are documented in configs/mmmq.yaml.
//
// It is part of the default mmmq binary (app.New).
package configdispatchers

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// Key is the list's key.
const Key = "mmmq.broker.dispatchers"

// Entries is the list mmmq.broker.dispatchers: one dispatcher.Settings per
// entry, in file order (the YAML keys are Settings' koanf tags).
type Entries []dispatcher.Settings

// The keys whose values an entry without its own path or timeout takes.
var (
	inheritedPath    = dispatcher.ConfigSection.Key() + ".path"
	inheritedTimeout = dispatcher.ConfigSection.Key() + ".timeout"
)

// Section is the list section mmmq.broker.dispatchers, registered by
// Module. Set in the file only; default empty. When the configuration is
// loaded, an entry's zero fields take dispatcher.DefaultSettings (commit
// policy every-message, interval 1s, max-count 1000), and an entry without
// path or timeout takes mmmq.broker.dispatch.path or .timeout (mmmq config
// check names that key as the source). Each entry is checked with
// dispatcher.Settings.Validate under its key ("mmmq.broker.dispatchers[0]"),
// names must be unique, and an inherited path or timeout that is already
// reported under mmmq.broker.dispatch is not reported again.
var Section = config.NewListSection[Entries](
	"broker.dispatchers", "a mapping with name, host and patterns", dispatcher.DefaultSettings, nil).
	WithInherited(map[string]string{"path": inheritedPath, "timeout": inheritedTimeout}).
	WithCrossCheck(check)

// check validates every entry (see Section).
func check(ds *Entries, w config.View) error {
	var errs []error
	seen := map[string]int{}
	for i, s := range *ds {
		key := fmt.Sprintf("%s[%d]", Key, i)
		for _, err := range config.Problems(s.Validate(key)) {
			var ke *config.KeyError
			if errors.As(err, &ke) && inheritsBad(ke.Key, key, s, w) {
				continue
			}
			errs = append(errs, err)
		}
		if j, dup := seen[s.Name]; dup && s.Name != "" {
			errs = append(errs, config.InvalidValue(key+".name", "duplicate dispatcher name %q (also %s[%d])", s.Name, Key, j))
		} else if !dup {
			seen[s.Name] = i
		}
	}
	return errors.Join(errs...)
}

// inheritsBad says whether the problem at field key of entry s (at key
// entry) is in a value inherited from a mmmq.broker.dispatch key that
// already has a problem of its own.
func inheritsBad(field, entry string, s dispatcher.Settings, w config.View) bool {
	switch field {
	case entry + ".path":
		return w.Failed(inheritedPath) && w.Value(inheritedPath) == any(s.Path)
	case entry + ".timeout":
		return w.Failed(inheritedTimeout) && w.Value(inheritedTimeout) == any(time.Duration(s.Timeout))
	}
	return false
}

// Build builds one Dispatcher per entry of mmmq.broker.dispatchers (as
// normalized by config.Load), in order, each labelled with its source
// "config mmmq.broker.dispatchers[<i>]" (dispatcher.WithSource). Errors
// name the entry and the key, e.g. "config: mmmq.broker.dispatchers[0]:
// ..." (a TLS file that cannot be read, a delivery limit out of range).
func Build(ds Entries) ([]*dispatcher.Dispatcher, error) {
	var out []*dispatcher.Dispatcher
	for i, s := range ds {
		key := fmt.Sprintf("%s[%d]", Key, i)
		d, err := dispatcher.FromSettings(s, key, "config "+key)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}

// Module registers Section and provides the configured dispatchers into
// the dispatchers group. It needs *config.Config (config.Module).
var Module = fx.Module("configdispatchers",
	config.ProvideSection(Section),
	fx.Provide(fx.Annotate(Build, fx.ResultTags(`group:"dispatchers,flatten"`))),
)
