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
//	        batch: {max-messages: 100}       # optional; default off
//
// The other delivery keys (max-abnormal-attempts, max-abnormal-duration,
// backoff-jitter, signing-secrets, headers, cloudevents) are documented in
// configs/mmmq.yaml.
//
// It is part of the default mmmq binary (app.New).
package configdispatchers

import (
	"fmt"

	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// Build builds one Dispatcher per entry of mmmq.broker.dispatchers (as
// normalized by config.Load), in order, each labelled with its source
// "config mmmq.broker.dispatchers[<i>]" (dispatcher.WithSource). Errors name the entry and the key,
// e.g. "config: mmmq.broker.dispatchers[0].host: ..." (invalid host or
// pattern).
func Build(ds config.DispatchersConfig) ([]*dispatcher.Dispatcher, error) {
	var out []*dispatcher.Dispatcher
	for i, dc := range ds {
		key := fmt.Sprintf("mmmq.broker.dispatchers[%d]", i)
		d, err := dispatcher.FromSettings(dispatcher.SettingsFromConfig(dc), key, "config "+key)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}

// Module provides the configured dispatchers into the dispatchers group. It
// needs config.DispatchersConfig (config.Module).
var Module = fx.Module("configdispatchers",
	fx.Provide(fx.Annotate(Build, fx.ResultTags(`group:"dispatchers,flatten"`))),
)
