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

// testDispatcher stands in for one element of the list section of
// plugins/configdispatchers (mmmq.broker.dispatchers, whose elements are
// dispatcher.Settings): some of its keys, none of its checks (those are
// the plugin's tests). Its duration type is one of its own, as
// dispatcher.Duration is.
type testDispatcher struct {
	Name     string            `koanf:"name"`
	Host     string            `koanf:"host"`
	Patterns []string          `koanf:"patterns"`
	Path     string            `koanf:"path"`
	Timeout  testDuration      `koanf:"timeout"`
	Headers  map[string]string `koanf:"headers"`
	Commit   struct {
		Policy   string       `koanf:"policy"`
		Interval testDuration `koanf:"interval"`
		MaxCount int          `koanf:"max-count"`
	} `koanf:"commit"`
	TLS struct {
		CAFile string `koanf:"ca-file"`
	} `koanf:"tls"`
}

// testDuration is a duration type of a module's own (dispatcher.Duration).
type testDuration time.Duration

// UnmarshalText makes it one for the loader (the loader parses it itself).
func (d *testDuration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = testDuration(v)
	return err
}

// testDispatchers is the list section; element defaults as the real one's
// (commit every-message, 1s, 1000), path and timeout inherited from
// mmmq.broker.dispatch.
var testDispatchers = func() *SectionOf[[]testDispatcher] {
	var elem testDispatcher
	elem.Commit.Policy, elem.Commit.Interval, elem.Commit.MaxCount = "every-message", testDuration(time.Second), 1000
	return NewListSection[[]testDispatcher]("broker.dispatchers", "a mapping with name, host and patterns", elem, nil).
		WithInherited(map[string]string{"path": "mmmq.broker.dispatch.path", "timeout": "mmmq.broker.dispatch.timeout"})
}()
