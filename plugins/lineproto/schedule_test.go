package lineproto

import (
	"testing"

	"github.com/mmmq/mmmq/modules/groups"
)

// PUBX deliver-at= and delay= are refused (scheduled messages are HTTP
// only for now), naming the HTTP members, and nothing is stored.
func TestPubXScheduleRefused(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	for _, line := range []string{`PUBX ts DURABLE delay=1h {"n":9}`, `PUBX ts DURABLE deliver-at=2100-01-01T00:00:00Z {"n":9}`} {
		expectPrefix(t, c.do(line), "ERR BAD_REQUEST attribute ")
	}
	expectPrefix(t, c.do(`PUBX ts DURABLE delay=1h {"n":9}`), "ERR BAD_REQUEST attribute delay: scheduled messages are not supported on the line protocol yet")
	expectPrefix(t, c.do(`PUBX ts DURABLE {"n":0}`), "OK 0 DURABLE")
}
