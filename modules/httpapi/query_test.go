package httpapi

import (
	"net/url"
	"strings"
	"testing"
)

var queryCases = []string{
	"", "ack=durable", "ack=written&x=1", "x=1&ack=accepted", "ack", "ack=", "a=1&&ack=b",
	"ack=durable&ack=written", "ACK=durable", "ack=dur%61ble", "ack=a+b", "x=%zz&ack=durable",
	"ack=durable;x=1", "x;y&ack=written", "=&=&ack==", "acks=durable", "ac=k&ack=k=v",
}

func TestQueryValueMatchesURLValues(t *testing.T) {
	// url.ParseQuery gives nothing for more than 10000 parameters.
	many := "ack=written" + strings.Repeat("&x=1", 10000)
	for _, raw := range append(queryCases, many, strings.Repeat("x=1&", 300)+"ack=accepted") {
		q, _ := url.ParseQuery(raw)
		if got, n := queryValue(raw, "ack"); got != q.Get("ack") || n != len(q["ack"]) {
			t.Errorf("queryValue(%q) = %q, %d; url.Values = %q, %d", raw, got, n, q.Get("ack"), len(q["ack"]))
		}
	}
}

func FuzzQueryValue(f *testing.F) {
	for _, raw := range queryCases {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, _ := url.ParseQuery(raw)
		if got, n := queryValue(raw, "ack"); got != q.Get("ack") || n != len(q["ack"]) {
			t.Fatalf("queryValue(%q) = %q, %d; url.Values = %q, %d", raw, got, n, q.Get("ack"), len(q["ack"]))
		}
	})
}
