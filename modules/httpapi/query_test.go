package httpapi

import (
	"net/url"
	"testing"
)

var queryCases = []string{
	"", "ack=durable", "ack=written&x=1", "x=1&ack=accepted", "ack", "ack=", "a=1&&ack=b",
	"ack=durable&ack=written", "ACK=durable", "ack=dur%61ble", "ack=a+b", "x=%zz&ack=durable",
	"ack=durable;x=1", "x;y&ack=written", "=&=&ack==", "acks=durable", "ac=k&ack=k=v",
}

func TestQueryValueMatchesURLValues(t *testing.T) {
	for _, raw := range queryCases {
		q, _ := url.ParseQuery(raw)
		if got, want := queryValue(raw, "ack"), q.Get("ack"); got != want {
			t.Errorf("queryValue(%q) = %q, url.Values.Get = %q", raw, got, want)
		}
	}
}

func FuzzQueryValue(f *testing.F) {
	for _, raw := range queryCases {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, _ := url.ParseQuery(raw)
		if got, want := queryValue(raw, "ack"), q.Get("ack"); got != want {
			t.Fatalf("queryValue(%q) = %q, url.Values.Get = %q", raw, got, want)
		}
	})
}
