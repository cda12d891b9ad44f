package ui

import (
	"errors"
	"time"

	"github.com/mmmq/mmmq/modules/config"
)

// Config is the plugin's configuration section, key "mmmq.ui" (environment:
// MMMQ_UI_ENABLED, MMMQ_UI_REFRESH, ...).
type Config struct {
	// Enabled serves the status page under /ui/ on the API port. Default
	// true; false registers no route.
	Enabled bool `koanf:"enabled"`
	// Refresh is how often an open page reloads itself (ui.js; the
	// "Pause refresh" button stops it), 500ms to 1h. Default 2s.
	Refresh time.Duration `koanf:"refresh"`
	// TopicsPerPage is the rows of one page of the topic table, 10 to
	// 1000. Default 100.
	TopicsPerPage int `koanf:"topics-per-page"`
	// Messages is how many of the last messages a topic's page shows when
	// the URL has no ?n= (which may ask for up to 100), 1 to 100. Default 20.
	Messages int `koanf:"messages"`
}

// Defaults of Config.
const (
	DefaultRefresh       = 2 * time.Second
	DefaultTopicsPerPage = 100
	DefaultMessages      = 20
	// MaxMessages is the most messages a topic's page shows (?n=).
	MaxMessages = 100
)

// ConfigSection registers Config under mmmq.ui. Module includes it
// (config.ProvideSection), where app.Sections finds it. Out-of-range values are
// errors naming the key (e.g. mmmq.ui.topics-per-page).
var ConfigSection = config.NewSection("ui",
	Config{Enabled: true, Refresh: DefaultRefresh, TopicsPerPage: DefaultTopicsPerPage, Messages: DefaultMessages},
	func(c *Config) error {
		var errs []error
		if c.Refresh < 500*time.Millisecond || c.Refresh > time.Hour {
			errs = append(errs, config.InvalidValue("mmmq.ui.refresh", "must be between 500ms and 1h; got %s", c.Refresh))
		}
		errs = append(errs,
			config.CheckIntRange("mmmq.ui.topics-per-page", int64(c.TopicsPerPage), 10, 1000),
			config.CheckIntRange("mmmq.ui.messages", int64(c.Messages), 1, MaxMessages))
		return errors.Join(errs...)
	})
