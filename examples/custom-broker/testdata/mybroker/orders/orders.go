// Package orders is a plugin with a configuration section of its own,
// mmmq.orders (MMMQ_ORDERS_* variables), and one Dispatcher.
package orders

import (
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// Config is the plugin's own section, mmmq.orders.
type Config struct {
	OrderHost string `koanf:"order-host"` // MMMQ_ORDERS_ORDER_HOST
}

var ConfigSection = config.NewSection("orders",
	Config{OrderHost: "http://localhost:8081"},
	func(c *Config) error {
		if _, err := dispatcher.ParseHost(c.OrderHost); err != nil {
			return config.InvalidValue("mmmq.orders.order-host", "%v", err)
		}
		return nil
	})

func NewOrderDispatcher(c Config) (*dispatcher.Dispatcher, error) {
	host, err := dispatcher.ParseHost(c.OrderHost)
	if err != nil {
		return nil, err
	}
	return dispatcher.New("order-dispatcher", host,
		dispatcher.MustPattern("order.**"), dispatcher.MustPattern("payment.*")), nil
}

// Module carries the section: app.Main loads the configuration with it.
var Module = fx.Module("orders",
	config.ProvideSection(ConfigSection), // registers mmmq.orders; provides Config
	dispatcher.Provide(NewOrderDispatcher),
)
