// Package orders is an example plugin package: it contributes two
// Dispatchers to the broker. Each constructor is an ordinary Fx provider;
// dispatcher.Provide puts its result into the `group:"dispatchers"` value
// group.
//
// It also shows a plugin's own configuration section. ConfigSection
// registers the keys under mmmq.orders, with their defaults and validation:
//
//	mmmq:
//	  orders:
//	    order-host: http://localhost:8081         # MMMQ_ORDERS_ORDER_HOST
//	    notification-host: http://localhost:8082  # MMMQ_ORDERS_NOTIFICATION_HOST
//
// Module registers it with config.ProvideSection, so that app.Main (which
// finds the sections of the modules it is given) and an app.New that loads
// inside the graph both read it; a binary that calls config.Load itself
// passes ConfigSection in LoadOptions.Sections. An unknown key under
// mmmq.orders, or a host that is not scheme://address:port, stops startup
// naming the key.
package orders

import (
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// Ports of the consumers this example expects by default
// (examples/consumer -addr).
const (
	OrderConsumerPort        = 8081
	NotificationConsumerPort = 8082
)

// Config is the plugin's section, key "mmmq.orders".
type Config struct {
	// OrderHost is the order consumer's base URL, scheme://address:port.
	// Default "http://localhost:8081".
	OrderHost string `koanf:"order-host"`
	// NotificationHost is the notification consumer's base URL,
	// scheme://address:port. Default "http://localhost:8082".
	NotificationHost string `koanf:"notification-host"`
}

// ConfigSection registers Config under mmmq.orders. A host that
// dispatcher.ParseHost refuses is an error naming its key, e.g.
// "config: mmmq.orders.order-host: parse host ...".
var ConfigSection = config.NewSection("orders",
	Config{OrderHost: "http://localhost:8081", NotificationHost: "http://localhost:8082"},
	func(c *Config) error {
		if _, err := dispatcher.ParseHost(c.OrderHost); err != nil {
			return config.InvalidValue("mmmq.orders.order-host", "%v", err)
		}
		if _, err := dispatcher.ParseHost(c.NotificationHost); err != nil {
			return config.InvalidValue("mmmq.orders.notification-host", "%v", err)
		}
		return nil
	})

// NewOrderDispatcher pushes order.** and payment.* to mmmq.orders.order-host.
func NewOrderDispatcher(c Config) (*dispatcher.Dispatcher, error) {
	host, err := dispatcher.ParseHost(c.OrderHost)
	if err != nil {
		return nil, err
	}
	return dispatcher.New("order-dispatcher", host,
		dispatcher.MustPattern("order.**"),
		dispatcher.MustPattern("payment.*"),
	), nil
}

// NewNotificationDispatcher pushes notification.** to
// mmmq.orders.notification-host.
func NewNotificationDispatcher(c Config) (*dispatcher.Dispatcher, error) {
	host, err := dispatcher.ParseHost(c.NotificationHost)
	if err != nil {
		return nil, err
	}
	return dispatcher.New("notification-dispatcher", host,
		dispatcher.MustPattern("notification.**"),
	), nil
}

// Module is the plugin: add it with app.WithModules (or to app.New). It
// carries its section, ConfigSection, and provides Config from it and the
// two dispatchers.
var Module = fx.Module("orders",
	config.ProvideSection(ConfigSection),
	dispatcher.Provide(NewOrderDispatcher),
	dispatcher.Provide(NewNotificationDispatcher),
)
