package dispatcher

import (
	"github.com/mmmq/mmmq/modules/config"
)

// OptionsFromConfig maps mmmq.broker.dispatch to Options: timeout ->
// DefaultTimeout, max-resends -> MaxResends (marked set, so 0 means no
// resend; see Options.MaxResends), backoff-initial, backoff-max,
// max-response-bytes (bytes) and path -> DefaultPath. BatchSize and Hooks
// are left zero (default, none). The app's Fx graph provides Options with it.
func OptionsFromConfig(d config.DispatchConfig) Options {
	return Options{
		BackoffInitial:   d.BackoffInitial,
		BackoffMax:       d.BackoffMax,
		DefaultTimeout:   d.Timeout,
		MaxResponseBytes: d.MaxResponseBytes,
		DefaultPath:      d.Path,
	}.WithMaxResends(d.MaxResends)
}

// OptionsFromSections is OptionsFromConfig(d) with NodeName set from
// mmmq.node-name ("" keeps the host name). The app's Fx graph provides
// Options with it.
func OptionsFromSections(d config.DispatchConfig, n config.NodeConfig) Options {
	o := OptionsFromConfig(d)
	o.NodeName = n.Name
	return o
}
