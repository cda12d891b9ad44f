// Package orders is an example plugin package: it contributes two
// Dispatchers to the broker, the Go mirror of seed 000's DispatcherConfig
// (@Bean orderDispatcher, @Bean notificationDispatcher). Each constructor is
// an ordinary Fx provider; dispatcher.Provide puts its result into the
// `group:"dispatchers"` value group.
package orders

import (
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/dispatcher"
)

// Ports of the consumers this example expects (examples/consumer -addr).
const (
	OrderConsumerPort        = 8081
	NotificationConsumerPort = 8082
)

// NewOrderDispatcher pushes order.** and payment.* to the consumer on
// localhost:8081 (seed 000: new Dispatcher("order-dispatcher", host,
// List.of(orderPattern, paymentPattern))).
func NewOrderDispatcher() *dispatcher.Dispatcher {
	return dispatcher.New("order-dispatcher",
		dispatcher.Host{Protocol: dispatcher.HTTP, Address: "localhost", Port: OrderConsumerPort},
		dispatcher.MustPattern("order.**"),
		dispatcher.MustPattern("payment.*"),
	)
}

// NewNotificationDispatcher pushes notification.** to the consumer on
// localhost:8082.
func NewNotificationDispatcher() *dispatcher.Dispatcher {
	return dispatcher.New("notification-dispatcher",
		dispatcher.Host{Protocol: dispatcher.HTTP, Address: "localhost", Port: NotificationConsumerPort},
		dispatcher.MustPattern("notification.**"),
	)
}

// Module is the plugin: add it to app.New.
var Module = fx.Module("orders",
	dispatcher.Provide(NewOrderDispatcher),
	dispatcher.Provide(NewNotificationDispatcher),
)
