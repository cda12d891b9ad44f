package ui

import (
	"strings"
	"testing"
	"time"
)

// TestSparkline: the points span the right edge, scaled to the largest
// lag; no samples, no points.
func TestSparkline(t *testing.T) {
	if p, top := sparkline(nil); p != "" || top != 0 {
		t.Fatalf("no samples: %q %d", p, top)
	}
	p, top := sparkline([]int64{0, 5, 10})
	if top != 10 || strings.Count(p, ",") != 3 || !strings.HasSuffix(p, "120.0,1.0") || !strings.Contains(p, ",23.0") {
		t.Fatalf("points %q, top %d", p, top)
	}
	full := make([]int64, sparkPoints)
	if p, _ := sparkline(full); !strings.HasPrefix(p, "0.0,23.0 ") {
		t.Fatalf("a full history starts at the left edge: %q", p)
	}
}

// TestAge: the short durations the tables show.
func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 1400 * time.Millisecond: "1s", 59 * time.Second: "59s", 61 * time.Second: "1m1s",
		2*time.Hour + 3*time.Minute: "2h3m", 50 * time.Hour: "2d2h", -time.Second: "0s",
	} {
		if got := age(d); got != want {
			t.Errorf("age(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestRedactServers: NATS URLs lose their user information.
func TestRedactServers(t *testing.T) {
	got := redactServers("nats://alice:s3cret@n1:4222, tls://tok3n@n2:4222,nats://n3:4222")
	if got != "nats://n1:4222, tls://n2:4222, nats://n3:4222" || strings.Contains(got, "s3cret") || strings.Contains(got, "tok3n") {
		t.Fatalf("%q", got)
	}
}

// TestMessageOfTruncates: content over maxContent bytes is cut at a rune
// boundary with "…"; id and time come from the stored JSON.
func TestMessageOfTruncates(t *testing.T) {
	long := `{"id":"m1","timestamp":1700000000000,"content":"` + strings.Repeat("é", 400) + `"}`
	m := messageOf(7, []byte(long))
	if m.ID != "m1" || m.Time != "2023-11-14 22:13:20.000" || !strings.HasSuffix(m.Content, "…") || len(m.Content) > maxContent+len("…") {
		t.Fatalf("%+v", m)
	}
	if !strings.HasSuffix(strings.TrimSuffix(m.Content, "…"), "é") {
		t.Fatalf("cut inside a rune: %q", m.Content[len(m.Content)-8:])
	}
	if m := messageOf(1, []byte("not json")); m.ID != "—" || m.Content != "not json" {
		t.Fatalf("%+v", m)
	}
}

// TestSamplerIsBounded: the histories stay bounded and a dispatcher that
// is gone is forgotten.
func TestSamplerIsBounded(t *testing.T) {
	s := newSampler(nil, nil, time.Second)
	at := time.Unix(0, 0)
	for i := range 3 * sparkPoints {
		lags := map[string]int64{"a": int64(i)}
		if i < 10 {
			lags["gone"] = 1
		}
		s.record(topicSample{at: at.Add(time.Duration(i) * time.Second), total: int64(i)}, lags)
	}
	if h := s.lag("a"); len(h) != sparkPoints || h[0] != 2*sparkPoints || h[len(h)-1] != 3*sparkPoints-1 {
		t.Fatalf("lag history of a: %d points, %v…", len(h), h[:3])
	}
	if h := s.lag("gone"); len(h) != 0 {
		t.Fatalf("a removed dispatcher kept %d points", len(h))
	}
	if len(s.lags) != 1 || len(s.topics) != rateSamples {
		t.Fatalf("%d dispatchers, %d topic samples", len(s.lags), len(s.topics))
	}
	if old, _ := s.oldest(); old.total != 3*sparkPoints-rateSamples {
		t.Fatalf("oldest sample %d", old.total)
	}
}
