package config

import (
	"errors"
	"math"
	"time"
)

// testDispatch stands in, in this package's tests, for the section of
// modules/dispatcher (mmmq.broker.dispatch), which this package cannot
// import: the same keys, defaults and checks. The app package's tests load
// the real one.
type testDispatch struct {
	Timeout          time.Duration `koanf:"timeout"`
	MaxResends       int           `koanf:"max-resends"`
	BackoffInitial   time.Duration `koanf:"backoff-initial"`
	BackoffMax       time.Duration `koanf:"backoff-max"`
	MaxResponseBytes int64         `koanf:"max-response-bytes"`
	Path             string        `koanf:"path"`
}

var dispatchSection = NewSection("broker.dispatch", testDispatch{
	Timeout: 30 * time.Second, MaxResends: 3, BackoffInitial: time.Second, BackoffMax: time.Minute,
	MaxResponseBytes: 64 << 10, Path: "/mmmq/messages",
}, func(d *testDispatch) error {
	const k = "mmmq.broker.dispatch."
	errs := []error{
		CheckPositive(k+"timeout", d.Timeout),
		CheckIntRange(k+"max-resends", int64(d.MaxResends), 0, math.MaxInt32),
		CheckPositive(k+"backoff-initial", d.BackoffInitial),
		CheckPositive(k+"backoff-max", d.BackoffMax),
		CheckIntRange(k+"max-response-bytes", d.MaxResponseBytes, 64, math.MaxInt32),
		CheckPath(k+"path", d.Path),
	}
	if d.BackoffInitial > 0 && d.BackoffMax > 0 && d.BackoffMax < d.BackoffInitial {
		errs = append(errs, InvalidValue(k+"backoff-max", "must be at least backoff-initial (%s); got %s", d.BackoffInitial, d.BackoffMax))
	}
	return errors.Join(errs...)
})
