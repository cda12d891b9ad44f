package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// k8sLinks are the variables Kubernetes injects for a Service named "mmmq"
// (port 8080, named "http") and one named "mmmq-server", less
// MMMQ_SERVER_PORT, which is a real key.
var k8sLinks = []string{
	"MMMQ_PORT=tcp://10.0.0.1:8080",
	"MMMQ_PORT_8080_TCP=tcp://10.0.0.1:8080",
	"MMMQ_PORT_8080_TCP_PROTO=tcp",
	"MMMQ_PORT_8080_TCP_PORT=8080",
	"MMMQ_PORT_8080_TCP_ADDR=10.0.0.1",
	"MMMQ_SERVICE_HOST=10.0.0.1",
	"MMMQ_SERVICE_PORT=8080",
	"MMMQ_SERVICE_PORT_HTTP=8080",
	"MMMQ_SERVER_SERVICE_HOST=10.0.0.2",
	"MMMQ_SERVER_SERVICE_PORT=8080",
	"MMMQ_SERVER_PORT_8080_TCP=tcp://10.0.0.2:8080",
	"MMMQ_SERVER_PORT_8080_TCP_PROTO=tcp",
	"MMMQ_SERVER_PORT_8080_TCP_PORT=8080",
	"MMMQ_SERVER_PORT_8080_TCP_ADDR=10.0.0.2",
	// Other protocols and an IPv6 cluster.
	"MMMQ_DNS_PORT_53_UDP=udp://[fd00::a]:53",
	"MMMQ_DNS_PORT_53_UDP_ADDR=fd00::a",
	"MMMQ_DNS_SERVICE_HOST=fd00::a",
	"MMMQ_SIG_PORT_9_SCTP_PROTO=sctp",
}

func TestKubernetesServiceLinksIgnored(t *testing.T) {
	cfg, err := load(t, "", append([]string{"MMMQ_LOGGING_LEVEL=debug"}, k8sLinks...)...)
	require.NoError(t, err)
	assert.Equal(t, "debug", cfg.Logging.Level, "real keys still apply")
	assert.Equal(t, 8080, cfg.Server.Port)
	var want []string
	for _, kv := range k8sLinks {
		name, _, _ := strings.Cut(kv, "=")
		want = append(want, name)
	}
	assert.ElementsMatch(t, want, cfg.IgnoredVars)
	assert.IsIncreasing(t, cfg.IgnoredVars, "sorted")

	// No service link: nothing ignored, the Config equals the defaults.
	cfg, err = load(t, "")
	require.NoError(t, err)
	assert.Nil(t, cfg.IgnoredVars)
}

func TestServiceLinkShapedTyposStillRefused(t *testing.T) {
	for _, kv := range []string{
		"MMMQ_SERVER_PROT=1",                  // a typo, no service-link shape
		"MMMQ_LINEPROTO_PORT=9000",            // the shape, but Kubernetes sets tcp://ip:port
		"MMMQ_SERVICE_HOST=mmmq.example",      // the shape, but not an IP address
		"MMMQ_SERVICE_PORT=http",              // the shape, but not a port number
		"MMMQ_PORT_8080_TCP_PROTO=http",       // the shape, but not tcp/udp/sctp
		"MMMQ_PORT_8080_TCP=http://h:8080",    // the shape, but not tcp://ip:port
		"MMMQ_SERVER_PORT_80_TCP_ADDR=server", // the shape, but not an IP address
	} {
		_, err := load(t, "", kv)
		require.Error(t, err, kv)
		assert.ErrorIs(t, err, ErrUnknownKey, kv)
		name, _, _ := strings.Cut(kv, "=")
		assert.Contains(t, err.Error(), "config: unknown environment variable "+name, kv)
	}
}

func TestServiceLinkValueInRealKeyNamesCause(t *testing.T) {
	_, err := load(t, "", append([]string{"MMMQ_SERVER_PORT=tcp://10.0.0.2:8080"}, k8sLinks...)...)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInvalidValue)
	assert.Len(t, flatten(err), 1, "%v", err)
	msg := err.Error()
	for _, want := range []string{
		"config: server.port: ", `"tcp://10.0.0.2:8080"`, "Kubernetes", `Service named "mmmq-server"`,
		"enableServiceLinks: false", "rename the Service", "(from MMMQ_SERVER_PORT)",
	} {
		assert.Contains(t, msg, want)
	}
	assert.NotContains(t, msg, "base-10")

	// A plugin section's keys follow the same rules: its service links are
	// ignored, a service-link value in one of its keys is refused, whatever
	// the key's type.
	env := []string{
		"MMMQ_RELAY_SERVICE_HOST=10.0.0.3", "MMMQ_RELAY_PORT_9000_TCP_ADDR=10.0.0.3",
		"MMMQ_RELAY_PORT=tcp://10.0.0.3:9000",
		"MMMQ_RELAY_PEER_PORT=udp://10.0.0.4:53",
	}
	_, err = Load(LoadOptions{Path: writeYAML(t, ""), PathExplicit: true, Environ: env, Sections: []Section{relaySection}})
	require.Error(t, err)
	assert.Len(t, flatten(err), 2, "%v", err)
	assert.Contains(t, err.Error(), `config: mmmq.relay.port: `)
	assert.Contains(t, err.Error(), `Service named "mmmq-relay"`)
	assert.Contains(t, err.Error(), `config: mmmq.relay.peer-port: `)
	assert.Contains(t, err.Error(), `Service named "mmmq-relay-peer"`)

	cfg, err := Load(LoadOptions{Path: writeYAML(t, ""), PathExplicit: true, Environ: env[:2], Sections: []Section{relaySection}})
	require.NoError(t, err)
	assert.Equal(t, []string{"MMMQ_RELAY_PORT_9000_TCP_ADDR", "MMMQ_RELAY_SERVICE_HOST"}, cfg.IgnoredVars)
	_, err = Load(LoadOptions{Path: writeYAML(t, ""), PathExplicit: true, Environ: []string{"MMMQ_RELAY_PROT=1"}, Sections: []Section{relaySection}})
	assert.ErrorIs(t, err, ErrUnknownKey)
}

// relayConfig is a test plugin section whose keys end like service links.
type relayConfig struct {
	// Port is a port number. Default 9000.
	Port int `koanf:"port"`
	// PeerPort is a string holding a port. Default "53".
	PeerPort string `koanf:"peer-port"`
}

var relaySection = NewSection("relay", relayConfig{Port: 9000, PeerPort: "53"}, nil)
