package dispatcher

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
)

// TestSelfRefusesTheBrokersOwnAddress: with the broker on port 8080 of
// every address, a host on port 8080 that reaches it (loopback names and
// addresses, 0.0.0.0, the host's interface addresses and name, either
// scheme) is refused, saying why; another port on localhost (a consumer
// beside the broker) and another machine are allowed. Bound to one
// address, only that address (and, for a loopback one, the loopback
// names) is the broker.
func TestSelfRefusesTheBrokersOwnAddress(t *testing.T) {
	inst := contract.NewInstance(8080)
	own := []string{"localhost", "LOCALHOST.", "app.localhost", "127.0.0.1", "127.1.2.3", "::1", "0.0.0.0", "::"}
	if h, err := os.Hostname(); err == nil && h != "" {
		own = append(own, h)
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				own = append(own, n.IP.String())
			}
		}
	}
	all := NewSelf("", inst)
	for _, addr := range own {
		for _, proto := range []Protocol{HTTP, HTTPS} {
			h := Host{Protocol: proto, Address: addr, Port: 8080}
			err := all.Check(h)
			if err == nil || !strings.Contains(err.Error(), "own listen address") || !strings.Contains(err.Error(), "server.port") {
				t.Errorf("Check(%s) = %v, want the own-address refusal", h, err)
			}
		}
	}
	for _, h := range []Host{{HTTP, "localhost", 8081}, {HTTP, "127.0.0.1", 9090}, {HTTP, "consumer.example", 8080}, {HTTP, "192.0.2.7", 8080}} {
		if err := all.Check(h); err != nil {
			t.Errorf("Check(%s) = %v, want allowed", h, err)
		}
	}

	// A port bound later (server.port 0) counts from then on.
	if err := all.Check(Host{HTTP, "localhost", 41234}); err != nil {
		t.Fatal(err)
	}
	inst.AddPort(41234)
	if err := all.Check(Host{HTTP, "localhost", 41234}); err == nil {
		t.Error("the port bound later is not the broker's")
	}

	loop := NewSelf("127.0.0.1", inst)
	if loop.Check(Host{HTTP, "localhost", 8080}) == nil || loop.Check(Host{HTTP, "192.0.2.7", 8080}) != nil {
		t.Error("bound to 127.0.0.1: want localhost refused and another address allowed")
	}
	one := NewSelf("10.1.2.3", inst)
	if one.Check(Host{HTTP, "10.1.2.3", 8080}) == nil || one.Check(Host{HTTP, "localhost", 8080}) != nil {
		t.Error("bound to 10.1.2.3: want it refused and localhost (not bound) allowed")
	}
	var none *Self
	if none.Check(Host{HTTP, "localhost", 8080}) != nil || NewSelf("", nil).Check(Host{HTTP, "localhost", 8080}) != nil {
		t.Error("no Self, or no instance: nothing refused")
	}
}

// TestStartupRefusesADispatcherToTheBroker: a dispatcher of the file or Go
// code whose host is the broker itself stops startup, naming the key (or
// the dispatcher and its provider); one on another port does not.
func TestStartupRefusesADispatcherToTheBroker(t *testing.T) {
	self := NewSelf("", contract.NewInstance(8080))
	h := Host{HTTP, "localhost", 8080}
	cfgD := New("fwd", h, MustPattern("**")).WithSource("config mmmq.broker.dispatchers[2]")
	goD := New("mine", h, MustPattern("**")).WithSource("Go provider example.com/x.New")
	ok := New("consumer", Host{HTTP, "localhost", 8081}, MustPattern("**"))
	set, err := SetOf(cfgD, goD, ok)
	if err != nil {
		t.Fatal(err)
	}
	err = checkOwnHosts(set, self)
	for _, want := range []string{"mmmq.broker.dispatchers[2].host", `dispatcher "mine" (Go provider example.com/x.New): host: http://localhost:8080`, "own listen address"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("checkOwnHosts = %v, want it to say %q", err, want)
		}
	}
	var ke *config.KeyError
	if err == nil || !strings.Contains(err.Error(), "config:") || !errors.As(err, &ke) {
		t.Errorf("checkOwnHosts = %v: want the file's entry as a *config.KeyError", err)
	}
	set, _ = SetOf(ok)
	if err := checkOwnHosts(set, self); err != nil {
		t.Errorf("another port: %v", err)
	}
}
