package dispatcher

import (
	"errors"
	"math"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
)

// Config holds the push delivery defaults shared by all dispatchers: the
// configuration section mmmq.broker.dispatch (ConfigSection), which
// Module registers and maps to Options.
type Config struct {
	// Timeout bounds one delivery attempt. Default 30s.
	Timeout time.Duration `koanf:"timeout"`
	// MaxResends is how many times a NACKed message is sent again before it
	// is logged, committed and skipped; 0 or more (0: one attempt, no
	// resend). Default 3 (4 attempts).
	MaxResends int `koanf:"max-resends"`
	// BackoffInitial is the first wait after an abnormal response; it doubles
	// per failure up to BackoffMax. Default 1s.
	BackoffInitial time.Duration `koanf:"backoff-initial"`
	// BackoffMax caps the exponential backoff; at least BackoffInitial. Default 60s.
	BackoffMax time.Duration `koanf:"backoff-max"`
	// MaxResponseBytes is how much of a consumer's response body is read, in
	// bytes; at least 64. Default 65536.
	MaxResponseBytes int64 `koanf:"max-response-bytes"`
	// Path is the default request path appended to a dispatcher's host;
	// must start with "/". Default "/mmmq/messages".
	Path string `koanf:"path"`
}

// ConfigSection is the section mmmq.broker.dispatch (environment
// MMMQ_BROKER_DISPATCH_<KEY>, e.g. MMMQ_BROKER_DISPATCH_BACKOFF_MAX), with
// the defaults above; its values are the zero-value defaults of Options
// too. Invalid values name their key: a timeout or backoff that is not > 0,
// max-resends below 0, backoff-max below backoff-initial, max-response-bytes
// outside 64..2147483647, a path not starting with "/" or holding a query,
// a fragment or spaces. A dispatcher of mmmq.broker.dispatchers without a
// path or timeout inherits this section's.
var ConfigSection = config.NewSection("broker.dispatch", Config{
	Timeout:          30 * time.Second,
	MaxResends:       3,
	BackoffInitial:   time.Second,
	BackoffMax:       60 * time.Second,
	MaxResponseBytes: 64 << 10,
	Path:             "/mmmq/messages",
}, validateConfig)

func validateConfig(d *Config) error {
	const k = "mmmq.broker.dispatch."
	errs := []error{
		config.CheckPositive(k+"timeout", d.Timeout),
		config.CheckIntRange(k+"max-resends", int64(d.MaxResends), 0, math.MaxInt32),
		config.CheckPositive(k+"backoff-initial", d.BackoffInitial),
		config.CheckPositive(k+"backoff-max", d.BackoffMax),
	}
	if d.BackoffInitial > 0 && d.BackoffMax > 0 && d.BackoffMax < d.BackoffInitial {
		errs = append(errs, config.InvalidValue(k+"backoff-max", "must be at least backoff-initial (%s); got %s", d.BackoffInitial, d.BackoffMax))
	}
	errs = append(errs,
		config.CheckIntRange(k+"max-response-bytes", d.MaxResponseBytes, 64, math.MaxInt32),
		config.CheckPath(k+"path", d.Path))
	return errors.Join(errs...)
}

// OptionsFromConfig maps mmmq.broker.dispatch to Options: timeout ->
// DefaultTimeout, max-resends -> MaxResends (marked set, so 0 means no
// resend; see Options.MaxResends), backoff-initial, backoff-max,
// max-response-bytes (bytes) and path -> DefaultPath. BatchSize and Hooks
// are left zero (default, none).
func OptionsFromConfig(d Config) Options {
	return Options{
		BackoffInitial:   d.BackoffInitial,
		BackoffMax:       d.BackoffMax,
		DefaultTimeout:   d.Timeout,
		MaxResponseBytes: d.MaxResponseBytes,
		DefaultPath:      d.Path,
	}.WithMaxResends(d.MaxResends)
}

// OptionsFromSections is OptionsFromConfig(d) with NodeName set from
// mmmq.node-name ("" keeps the host name) and InstanceID from inst (nil:
// none). Module provides Options with it.
func OptionsFromSections(d Config, n config.NodeConfig, inst *contract.Instance) Options {
	o := OptionsFromConfig(d)
	o.NodeName = n.Name
	if inst != nil {
		o.InstanceID = inst.ID()
	}
	return o
}
