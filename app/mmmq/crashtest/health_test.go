package crashtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Endpoint health of the real binary: the circuit breaker
// (breaker-failures, breaker-cooloff) and the auto-pause (pause-after) of
// dispatchers declared in the configuration file and created through the
// admin API, against consumers that are down (connection refused, or
// answering 503) and come back.

// hPush is one push a healthConsumer received.
type hPush struct {
	At         time.Time
	Dispatcher string
	Topic      string
	Offset     int64
	ID         string
	Acked      bool // answered ACK; otherwise 503
}

// healthConsumer answers every push ACK while up; while down it answers
// 503 after slow (the state read when the push arrives). It records every
// push with its arrival time.
type healthConsumer struct {
	slow   time.Duration
	mu     sync.Mutex
	down   bool
	pushes []hPush
}

func (c *healthConsumer) setDown(down bool) {
	c.mu.Lock()
	c.down = down
	c.mu.Unlock()
}

func (c *healthConsumer) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	off, _ := strconv.ParseInt(r.Header.Get("mmmq-offset"), 10, 64)
	c.mu.Lock()
	down := c.down
	c.pushes = append(c.pushes, hPush{At: at, Dispatcher: r.Header.Get("mmmq-consumer-id"), Topic: r.Header.Get("mmmq-topic"),
		Offset: off, ID: r.Header.Get("mmmq-message-id"), Acked: !down})
	c.mu.Unlock()
	if down {
		time.Sleep(c.slow)
		http.Error(w, `{"error":"down"}`, http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"acknowledgement":"ACK"}`)
}

func (c *healthConsumer) snapshot() []hPush {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]hPush(nil), c.pushes...)
}

// listen serves c on a new listener on 127.0.0.1 and returns its port.
func (c *healthConsumer) listen(t *testing.T) int {
	port, _ := listenRound(t, 0, c.serve)
	return port
}

// closedPort returns a port of 127.0.0.1 nothing listens on (it did a
// moment ago: the kernel refuses connections to it).
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// refusingProxy stands between the broker and a consumer so that the
// connections to a consumer that refuses them can be counted: it accepts
// each connection of the broker and records when. While up it relays the
// bytes to the consumer. While down it dials the consumer's address where
// nothing listens (the dial is refused: ECONNREFUSED, counted), holds the
// broker's connection for hold and resets it (RST): the broker sees a
// connection error, an abnormal answer.
type refusingProxy struct {
	t       *testing.T
	ln      net.Listener
	backend string // the consumer, while up
	dead    string // where nothing listens, while down
	hold    time.Duration

	mu      sync.Mutex
	down    bool
	downAt  []time.Time // connections accepted while down
	refused int         // their dials refused (ECONNREFUSED)
	other   []string    // their dials that failed otherwise, or succeeded
	live    map[net.Conn]bool
	wg      sync.WaitGroup
}

func newRefusingProxy(t *testing.T, backendPort int, hold time.Duration) *refusingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &refusingProxy{t: t, ln: ln, backend: fmt.Sprintf("127.0.0.1:%d", backendPort),
		dead: fmt.Sprintf("127.0.0.1:%d", closedPort(t)), hold: hold, live: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.setDown(true) // closes the relayed connections
		p.wg.Wait()
	})
	return p
}

func (p *refusingProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// setDown switches the proxy; going down closes every relayed connection
// (the broker's kept-alive connections to the consumer end with it).
func (p *refusingProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.live {
			c.Close()
		}
	}
}

func (p *refusingProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		if down {
			p.downAt = append(p.downAt, time.Now())
		}
		p.mu.Unlock()
		p.wg.Add(1)
		if down {
			go p.refuse(c)
		} else {
			go p.relay(c)
		}
	}
}

func (p *refusingProxy) refuse(c net.Conn) {
	defer p.wg.Done()
	bc, err := net.DialTimeout("tcp", p.dead, 2*time.Second)
	p.mu.Lock()
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		p.refused++
	case err != nil:
		p.other = append(p.other, err.Error())
	default:
		bc.Close()
		p.other = append(p.other, "the dial of the dead address was answered")
	}
	p.mu.Unlock()
	time.Sleep(p.hold)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close with a reset
	}
	c.Close()
}

func (p *refusingProxy) relay(c net.Conn) {
	defer p.wg.Done()
	bc, err := net.DialTimeout("tcp", p.backend, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.down { // went down while dialing
		p.mu.Unlock()
		c.Close()
		bc.Close()
		return
	}
	p.live[c], p.live[bc] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(bc, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, bc); done <- struct{}{} }()
	<-done
	c.Close()
	bc.Close()
	<-done
	p.mu.Lock()
	delete(p.live, c)
	delete(p.live, bc)
	p.mu.Unlock()
}

// counts returns the connections accepted while down, the refused dials
// and the other dial outcomes.
func (p *refusingProxy) counts() ([]time.Time, int, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.downAt...), p.refused, append([]string(nil), p.other...)
}

// hStatus is what the health tests read of GET /mmmq/dispatchers/{name}.
type hStatus struct {
	Paused      bool       `json:"paused"`
	PauseReason string     `json:"pauseReason"`
	PausedAt    *time.Time `json:"pausedAt"`
	Breaker     *struct {
		State          string  `json:"state"`
		CooloffSeconds float64 `json:"cooloffSeconds"`
		Opened         uint64  `json:"opened"`
		Probes         uint64  `json:"probes"`
	} `json:"breaker"`
	Topics []struct {
		Topic         string `json:"topic"`
		Committed     int64  `json:"committed"`
		HighWatermark int64  `json:"highWatermark"`
		DeadLettered  uint64 `json:"deadLettered"`
		Exhausted     uint64 `json:"exhausted"`
		LastError     string `json:"lastError"`
	} `json:"topics"`
}

func getStatus(b *broker, name string) (hStatus, error) {
	resp, err := httpClient.Get(b.base + "/mmmq/dispatchers/" + name)
	if err != nil {
		return hStatus{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return hStatus{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return hStatus{}, fmt.Errorf("GET /mmmq/dispatchers/%s: %d %s", name, resp.StatusCode, data)
	}
	var st hStatus
	if err := json.Unmarshal(data, &st); err != nil {
		return hStatus{}, fmt.Errorf("GET /mmmq/dispatchers/%s: %v: %s", name, err, data)
	}
	return st, nil
}

func mustStatus(t *testing.T, b *broker, name string) hStatus {
	t.Helper()
	st, err := getStatus(b, name)
	if err != nil {
		t.Fatalf("%v\n%s", err, b.logTail())
	}
	return st
}

// mustCreate creates an api dispatcher from the JSON spec and fails the
// test on anything but 201.
func mustCreate(t *testing.T, b *broker, spec string) {
	t.Helper()
	resp, err := httpClient.Post(b.base+"/mmmq/dispatchers", "application/json", strings.NewReader(spec))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /mmmq/dispatchers %s: %d %s", spec, resp.StatusCode, data)
	}
}

// checkOwnBroker fails the test unless the data root's lock file names
// b's pid: the broker answering at b.base (read from b's own log) is the
// process this test started, on root.
func checkOwnBroker(t *testing.T, b *broker, root string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, ".lock"))
	if err != nil {
		t.Fatalf("the data root's lock file: %v", err)
	}
	if got, want := strings.TrimSpace(string(data)), strconv.Itoa(b.cmd.Process.Pid); got != want {
		t.Fatalf("the data root %s is locked by pid %s, not by the broker this test started (pid %s)", root, got, want)
	}
}

// waitCommitted polls until every topic of each named dispatcher has
// committed want messages, or fails after d.
func waitCommitted(t *testing.T, b *broker, names []string, topics []string, want int64, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		done, last := true, ""
		for _, n := range names {
			st, err := getStatus(b, n)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for _, tp := range st.Topics {
				got[tp.Topic] = tp.Committed
			}
			for _, tp := range topics {
				if got[tp] != want {
					done, last = false, fmt.Sprintf("%s: committed %v, want %d on %v (paused %v)", n, got, want, topics, st.Paused)
				}
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered within %s: %s\n%s", d, last, b.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkAckedInOrder checks that the ACKed pushes of dispatcher name on
// each topic are, in arrival order, offsets 0..n-1 once each with the
// published ids (nothing lost, skipped or sent twice once ACKed).
func checkAckedInOrder(t *testing.T, name string, pushes []hPush, ids map[string][]string) {
	t.Helper()
	for topic, want := range ids {
		var got []int64
		for _, p := range pushes {
			if p.Dispatcher != name || p.Topic != topic || !p.Acked {
				continue
			}
			if int(p.Offset) < len(want) && p.ID != want[p.Offset] {
				t.Errorf("%s/%s: offset %d pushed with id %q, published as %q", name, topic, p.Offset, p.ID, want[p.Offset])
			}
			got = append(got, p.Offset)
		}
		ok := len(got) == len(want)
		for i := 0; ok && i < len(got); i++ {
			ok = got[i] == int64(i)
		}
		if !ok {
			t.Errorf("%s/%s: ACKed offsets in arrival order %v, want 0..%d once each", name, topic, got, len(want)-1)
		}
	}
}

// checkNoDeadLetters fails when the dispatcher's dead-letter topic holds
// anything.
func checkNoDeadLetters(t *testing.T, b *broker, name string) {
	t.Helper()
	dl, err := readAll(b.base, "dead-letter."+name)
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) > 0 {
		t.Errorf("dead-letter.%s holds %d messages, want none", name, len(dl))
	}
}

// publishN publishes n messages (DURABLE) to each topic, appending their
// ids to ids[topic] in offset order.
func publishN(t *testing.T, b *broker, topics []string, n int, ids map[string][]string) {
	t.Helper()
	for i := 0; i < n; i++ {
		for _, tp := range topics {
			id := fmt.Sprintf("%s-%d", tp, len(ids[tp]))
			r := mustPublish(t, b, tp, id, "durable")
			if r.Offset != int64(len(ids[tp])) {
				t.Fatalf("publish %s: offset %d, want %d", id, r.Offset, len(ids[tp]))
			}
			ids[tp] = append(ids[tp], id)
		}
	}
}

// breakerSchedule is the most probes a breaker whose cool-offs are first,
// doubling up to most, can send in d after it opened.
func breakerSchedule(first, most, d time.Duration) int {
	n, at, c := 0, first, first
	for at < d {
		n++
		c = min(2*c, most)
		at += c
	}
	return n
}

// TestBinaryBreakerOneProbePerCooloff: four dispatchers with
// breaker-failures 3 and breaker-cooloff 500ms (backoff-max 2s, so the
// cool-offs are 0.5, 1, 2, 2 … s), two from the configuration file and two
// created through the admin API, each on two topics, each pushing to its
// own consumer; a fifth without a breaker is the negative control. For 10
// s the consumers are down: two answer 503 (after 300 ms), two refuse the
// connection (counted at a proxy that accepts the broker's connection,
// dials the consumer, is refused, and resets the broker's connection after
// 300 ms). While down each consumer gets at most the 3 failures that open
// the breaker, the push of the other topic in flight then, and one probe
// per cool-off, never two attempts closer than the cool-off in force;
// the status shows closed, open, half-open and closed again; once back the
// next probe reaches the consumer within one cool-off (+1 s of slack) and
// every message is ACKed once, in order, nothing dead-lettered.
func TestBinaryBreakerOneProbePerCooloff(t *testing.T) {
	const (
		failures = 3
		first    = 500 * time.Millisecond
		most     = 2 * time.Second
		hold     = 300 * time.Millisecond
		downFor  = 10 * time.Second
		tol      = 100 * time.Millisecond // the consumer's clock against the broker's timers
	)
	topics := []string{"br.a", "br.b"}
	// The 503 consumers, the consumers behind the refusing proxies, and
	// the negative control's.
	c503 := map[string]*healthConsumer{"cfg-503": {slow: hold}, "api-503": {slow: hold}}
	cBack := map[string]*healthConsumer{"cfg-refused": {}, "api-refused": {}}
	ctl := &healthConsumer{slow: hold}
	// cfg-closed pushes straight to a port nothing listens on while down:
	// the broker itself sees ECONNREFUSED; its attempts are not countable
	// from outside, so its status (probes, openings) is checked instead.
	cClosed := &healthConsumer{}
	flip := newFlipServer(t, cClosed.serve)
	proxies := map[string]*refusingProxy{}
	for n, c := range cBack {
		proxies[n] = newRefusingProxy(t, c.listen(t), hold)
	}
	ports := map[string]int{"control": ctl.listen(t), "cfg-refused": proxies["cfg-refused"].port(), "api-refused": proxies["api-refused"].port()}
	for n, c := range c503 {
		ports[n] = c.listen(t)
	}
	root := filepath.Join(t.TempDir(), "data")
	b := startBroker(t, brokerConf{DataDir: root, BackoffInitial: 50 * time.Millisecond, BackoffMax: most, Metrics: true,
		Dispatchers: []dispatcherConf{
			{Name: "cfg-503", Port: ports["cfg-503"], Patterns: []string{"br.*"}, BreakerFailures: failures, BreakerCooloff: first},
			{Name: "cfg-refused", Port: ports["cfg-refused"], Patterns: []string{"br.*"}, BreakerFailures: failures, BreakerCooloff: first},
			{Name: "cfg-closed", Port: flip.port, Patterns: []string{"br.*"}, BreakerFailures: failures, BreakerCooloff: first},
			{Name: "control", Port: ports["control"], Patterns: []string{"br.*"}},
		}})
	checkOwnBroker(t, b, root)
	for _, n := range []string{"api-503", "api-refused"} {
		mustCreate(t, b, fmt.Sprintf(`{"name":%q,"host":"http://127.0.0.1:%d","patterns":["br.*"],"breaker-failures":%d,"breaker-cooloff":%q}`,
			n, ports[n], failures, first.String()))
	}
	guarded := []string{"api-503", "api-refused", "cfg-503", "cfg-refused"}
	all := append([]string{"control", "cfg-closed"}, guarded...)

	ids := map[string][]string{}
	publishN(t, b, topics, 3, ids)
	waitCommitted(t, b, all, topics, 3, 15*time.Second)

	// The status of each guarded dispatcher's breaker, polled.
	type seen struct {
		at    time.Time
		state string
	}
	states := map[string][]seen{}
	var smu sync.Mutex
	poll := func() {
		for _, n := range append([]string{"cfg-closed"}, guarded...) {
			if st, err := getStatus(b, n); err == nil && st.Breaker != nil {
				smu.Lock()
				states[n] = append(states[n], seen{time.Now(), st.Breaker.State})
				smu.Unlock()
			}
		}
	}
	poll() // before the consumers fall
	stopPoll := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			poll()
			select {
			case <-stopPoll:
				return
			case <-time.After(40 * time.Millisecond):
			}
		}
	}()

	// Down for 10 s, while 10 more messages per topic are published.
	for _, c := range c503 {
		c.setDown(true)
	}
	ctl.setDown(true)
	for _, p := range proxies {
		p.setDown(true)
	}
	flip.down()
	downAt := time.Now()
	publishN(t, b, topics, 10, ids)
	time.Sleep(time.Until(downAt.Add(downFor / 2)))
	var closedErr []string // cfg-closed's last errors halfway
	for _, tp := range mustStatus(t, b, "cfg-closed").Topics {
		closedErr = append(closedErr, tp.LastError)
	}
	time.Sleep(time.Until(downAt.Add(downFor)))
	flip.up()
	for _, c := range c503 {
		c.setDown(false)
	}
	ctl.setDown(false)
	for _, p := range proxies {
		p.setDown(false)
	}
	upAt := time.Now()
	waitCommitted(t, b, all, topics, 13, 20*time.Second)
	close(stopPoll)
	<-polled

	// While down: attempts per dispatcher (requests, or connections at the
	// proxy), with their times.
	attempts := map[string][]time.Time{}
	firstAck := map[string]time.Time{}
	for n, c := range c503 {
		for _, p := range c.snapshot() {
			if !p.At.Before(downAt) && p.At.Before(upAt) {
				attempts[n] = append(attempts[n], p.At)
			}
			if p.Acked && !p.At.Before(upAt) && firstAck[n].IsZero() {
				firstAck[n] = p.At
			}
		}
	}
	for n, p := range proxies {
		at, refused, other := p.counts()
		attempts[n] = at
		if refused != len(at) || len(other) > 0 {
			t.Errorf("%s: %d connections while down, %d of the proxy's dials refused (ECONNREFUSED), other outcomes %v", n, len(at), refused, other)
		}
		for _, q := range cBack[n].snapshot() {
			if !q.At.Before(downAt) && q.At.Before(upAt) {
				t.Errorf("%s: the consumer behind the proxy got a push while down at %v", n, q.At.Sub(downAt))
			}
			if q.Acked && !q.At.Before(upAt) && firstAck[n].IsZero() {
				firstAck[n] = q.At
			}
		}
	}
	var ctlDown int
	for _, p := range ctl.snapshot() {
		if !p.At.Before(downAt) && p.At.Before(upAt) {
			ctlDown++
		}
	}

	// The opening: the failures that open it plus the other topic's push
	// in flight then; then one probe per cool-off.
	burst := failures + len(topics) - 1
	bound := burst + breakerSchedule(first, most, downFor) + 1
	var report []string
	for _, n := range guarded {
		at := attempts[n]
		if len(at) > bound {
			t.Errorf("%s: %d attempts while down for %s, want at most %d (%d to open it, one probe per cool-off)", n, len(at), downFor, bound, burst)
		}
		if len(at) < failures+3 {
			t.Errorf("%s: %d attempts while down, want the %d that open the breaker and at least 3 probes", n, len(at), failures)
		}
		var gaps []string
		cool := first
		for i := burst; i < len(at); i++ {
			gap := at[i].Sub(at[i-1])
			gaps = append(gaps, gap.Round(10*time.Millisecond).String())
			if gap < cool-tol {
				t.Errorf("%s: attempt %d %s after the previous one, within the cool-off of %s (attempts at %v)", n, i+1, gap, cool, sinceAll(downAt, at))
			}
			cool = min(2*cool, most)
		}
		back := firstAck[n].Sub(upAt)
		if firstAck[n].IsZero() || back > most+hold+time.Second {
			t.Errorf("%s: first ACKed push %s after the consumer came back, want within one cool-off (%s) + %s + 1s", n, back, most, hold)
		}
		smu.Lock()
		seq := changes(states[n], func(s seen) string { return s.state })
		smu.Unlock()
		joined := strings.Join(seq, ">")
		if len(seq) < 4 || seq[0] != "closed" || seq[len(seq)-1] != "closed" || !strings.Contains(joined, "open>half-open") {
			t.Errorf("%s: breaker states seen %s, want closed, then open and half-open, then closed", n, joined)
		}
		st := mustStatus(t, b, n)
		if st.Breaker == nil || st.Breaker.State != "closed" || st.Breaker.Opened < 2 || st.Breaker.Probes < 3 {
			t.Errorf("%s: breaker at the end %+v, want closed, opened more than once, 3 probes or more", n, st.Breaker)
		} else {
			m := metricValues(t, b)
			if got := m[fmt.Sprintf(`mmmq_dispatch_breaker_opened_total{dispatcher=%q}`, n)]; uint64(got) != st.Breaker.Opened {
				t.Errorf("%s: mmmq_dispatch_breaker_opened_total %v, status opened %d", n, got, st.Breaker.Opened)
			}
		}
		report = append(report, fmt.Sprintf("%s: %d attempts while down (bound %d), gaps after the opening %v, first ACK %s after back, states %s, opened %d, probes %d",
			n, len(at), bound, gaps, back.Round(time.Millisecond), joined, st.Breaker.Opened, st.Breaker.Probes))
	}
	// The negative control: without a breaker the same dead consumers get
	// more than the bound.
	if ctlDown <= bound {
		t.Errorf("control (no breaker): %d pushes while down, want more than the breaker's bound %d (else the bound proves nothing)", ctlDown, bound)
	}
	for n, c := range c503 {
		checkAckedInOrder(t, n, c.snapshot(), ids)
	}
	for n, c := range cBack {
		checkAckedInOrder(t, n, c.snapshot(), ids)
	}
	checkAckedInOrder(t, "control", ctl.snapshot(), ids)
	checkAckedInOrder(t, "cfg-closed", cClosed.snapshot(), ids)
	// cfg-closed, from the broker's side: refused connections, a probe per
	// cool-off at most (its probes counter), back within one cool-off.
	if len(closedErr) != len(topics) || !strings.Contains(strings.Join(closedErr, "|"), "connection refused") {
		t.Errorf("cfg-closed: last errors while down %q, want a refused connection", closedErr)
	}
	var closedBack time.Duration = -1
	for _, p := range cClosed.snapshot() {
		if !p.At.Before(upAt) {
			closedBack = p.At.Sub(upAt)
			break
		}
	}
	if closedBack < 0 || closedBack > most+time.Second {
		t.Errorf("cfg-closed: first push %s after the consumer came back, want within one cool-off (%s) + 1s", closedBack, most)
	}
	cst := mustStatus(t, b, "cfg-closed")
	smu.Lock()
	cseq := changes(states["cfg-closed"], func(s seen) string { return s.state })
	smu.Unlock()
	maxProbes := uint64(breakerSchedule(first, most, downFor) + 1)
	if cst.Breaker == nil || cst.Breaker.State != "closed" || cst.Breaker.Probes < 3 || cst.Breaker.Probes > maxProbes ||
		len(cseq) < 3 || cseq[0] != "closed" || cseq[1] != "open" || cseq[len(cseq)-1] != "closed" {
		t.Errorf("cfg-closed: breaker %+v, states %v; want closed at the end, 3 to %d probes, closed then open … closed", cst.Breaker, cseq, maxProbes)
	} else {
		report = append(report, fmt.Sprintf("cfg-closed (refused by the kernel): last error %q, opened %d, probes %d (at most %d), states %s, first push %s after back",
			closedErr[0], cst.Breaker.Opened, cst.Breaker.Probes, maxProbes, strings.Join(cseq, ">"), closedBack.Round(time.Millisecond)))
	}
	for _, n := range all {
		checkNoDeadLetters(t, b, n)
	}
	b.stop()
	for _, r := range report {
		t.Log(r)
	}
	t.Logf("control (no breaker): %d pushes while down", ctlDown)
}

// changes is the sequence of values of key over xs with repeats dropped
// (closed, closed, open → closed, open).
func changes[T any](xs []T, key func(T) string) []string {
	var out []string
	for _, x := range xs {
		if k := key(x); len(out) == 0 || out[len(out)-1] != k {
			out = append(out, k)
		}
	}
	return out
}

// sinceAll renders times as offsets from t0.
func sinceAll(t0 time.Time, at []time.Time) []string {
	out := make([]string, len(at))
	for i, a := range at {
		out[i] = a.Sub(t0).Round(10 * time.Millisecond).String()
	}
	return out
}

// flipServer serves a handler on a fixed port of 127.0.0.1 that can be
// taken down (nothing listens there: connections are refused) and brought
// up again on the same port.
type flipServer struct {
	t    *testing.T
	port int
	addr string
	h    http.HandlerFunc
	srv  *http.Server
	done chan struct{}
}

func newFlipServer(t *testing.T, h http.HandlerFunc) *flipServer {
	port := closedPort(t)
	f := &flipServer{t: t, port: port, addr: fmt.Sprintf("127.0.0.1:%d", port), h: h}
	f.up()
	t.Cleanup(f.down)
	return f
}

func (f *flipServer) up() {
	f.t.Helper()
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		f.t.Fatalf("listen again on %s: %v", f.addr, err)
	}
	f.srv = &http.Server{Addr: f.addr, ReadHeaderTimeout: 5 * time.Second, Handler: f.h}
	f.done = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		_ = srv.Serve(ln)
	}(f.srv, f.done)
}

// down closes the listener and every connection.
func (f *flipServer) down() {
	if f.srv == nil {
		return
	}
	_ = f.srv.Close()
	select {
	case <-f.done:
	case <-time.After(5 * time.Second):
		f.t.Errorf("consumer on %s did not close", f.addr)
	}
	f.srv = nil
}

// pauseRecords reads the data root's paused.json: name → reason.
func pauseRecords(t *testing.T, root string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "paused.json"))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}
	}
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paused []struct {
			Name   string `json:"name"`
			Reason string `json:"reason"`
		} `json:"paused"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("paused.json: %v: %s", err, data)
	}
	out := map[string]string{}
	for _, r := range doc.Paused {
		out[r.Name] = r.Reason
	}
	return out
}

// auditLines returns the broker log's audit lines (logger admin.audit)
// that hold msg and name the dispatcher.
func auditLines(b *broker, msg, name string) []string {
	var out []string
	for _, l := range strings.Split(b.logText(), "\n") {
		if strings.Contains(l, `"admin.audit"`) && strings.Contains(l, msg) && strings.Contains(l, fmt.Sprintf(`"dispatcher":%q`, name)) {
			out = append(out, l)
		}
	}
	return out
}

// cli runs the binary's command line against the broker and returns its
// exit code and output.
func cli(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MMMQ_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("%v: %v", args, err)
	return -1, ""
}

// TestBinaryAutoPauseAcrossRestartsThenResume: pause-after 5s on a
// dispatcher of the configuration file whose consumer refuses connections
// and on one created through the admin API whose consumer answers 503; a
// third in the file without pause-after, on a consumer answering 503 too,
// is the negative control. The consumers go down 3 s before the broker is
// restarted (SIGTERM): the failing time is kept in memory, so the count
// starts again at the first abnormal answer after the restart. The test
// asserts that neither pauses before 5 s after the restart (so not 5 s
// after the consumers went down either), that both are paused within 5 s
// + 3 s of it (pauseReason auto, pausedAt, paused.json, an audit line,
// mmmq_dispatch_paused{reason="auto"} 1), and the control is not. Then
// kill -9 and a restart: both still paused with the same reason and time,
// nothing pushed although the consumers are back, while the control
// delivers. Resumed, one through the admin API and one through
// `mmmq dispatchers resume`, each delivers from its checkpoint: every
// message ACKed once, in order, nothing dead-lettered.
func TestBinaryAutoPauseAcrossRestartsThenResume(t *testing.T) {
	const (
		after    = 5 * time.Second
		beforeRs = 3 * time.Second // from the consumers' fall to the restart
		late     = 3 * time.Second // generous: a loaded machine
	)
	topics := []string{"ap.a", "ap.b"}
	cRef := &healthConsumer{}
	flip := newFlipServer(t, cRef.serve)
	c503, cCtl := &healthConsumer{}, &healthConsumer{}
	p503, pCtl := c503.listen(t), cCtl.listen(t)
	root := filepath.Join(t.TempDir(), "data")
	conf := brokerConf{DataDir: root, Metrics: true, Dispatchers: []dispatcherConf{
		{Name: "cfg-pause", Port: flip.port, Patterns: []string{"ap.*"}, PauseAfter: after},
		{Name: "control", Port: pCtl, Patterns: []string{"ap.*"}},
	}}
	paused := []string{"api-pause", "cfg-pause"}
	all := append([]string{"control"}, paused...)

	b := startBroker(t, conf)
	checkOwnBroker(t, b, root)
	mustCreate(t, b, fmt.Sprintf(`{"name":"api-pause","host":"http://127.0.0.1:%d","patterns":["ap.*"],"pause-after":%q}`, p503, after.String()))
	ids := map[string][]string{}
	publishN(t, b, topics, 3, ids)
	waitCommitted(t, b, all, topics, 3, 15*time.Second)

	// Down: refused, 503, 503; 5 more messages per topic.
	flip.down()
	c503.setDown(true)
	cCtl.setDown(true)
	downAt := time.Now()
	publishN(t, b, topics, 5, ids)
	time.Sleep(time.Until(downAt.Add(beforeRs)))
	for _, n := range all {
		if st := mustStatus(t, b, n); st.Paused {
			t.Fatalf("%s paused %s after the consumers fell, before pause-after", n, time.Since(downAt))
		}
	}
	b.stop()

	// The restart, 3 s into the failure.
	restartAt := time.Now()
	b = startBroker(t, conf)
	checkOwnBroker(t, b, root)
	obs, pausedAt := map[string]time.Time{}, map[string]time.Time{}
	for deadline := restartAt.Add(after + late); len(obs) < len(paused); time.Sleep(20 * time.Millisecond) {
		for _, n := range paused {
			if _, ok := obs[n]; ok {
				continue
			}
			st := mustStatus(t, b, n)
			now := time.Now()
			if !st.Paused {
				continue
			}
			obs[n] = now
			if st.PauseReason != "auto" || st.PausedAt == nil {
				t.Fatalf("%s paused with pauseReason %q, pausedAt %v; want auto and a time", n, st.PauseReason, st.PausedAt)
			}
			pausedAt[n] = *st.PausedAt
			if now.Before(restartAt.Add(after)) || st.PausedAt.Before(restartAt.Add(after)) {
				t.Errorf("%s paused %s after the restart (pausedAt %s after it), before pause-after %s", n,
					now.Sub(restartAt), st.PausedAt.Sub(restartAt), after)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("paused within %s of the restart: %v, want %v\n%s", after+late, obs, paused, b.logTail())
		}
	}
	var firstAfter time.Time // api-pause's first push after the restart
	for _, p := range c503.snapshot() {
		if !p.At.Before(restartAt) {
			firstAfter = p.At
			break
		}
	}
	if firstAfter.IsZero() {
		t.Fatalf("api-pause pushed nothing after the restart")
	}
	for _, n := range paused {
		if d := pausedAt[n].Sub(downAt); d < beforeRs+after {
			t.Errorf("%s paused %s after the consumers fell, before %s (the restart) + pause-after: the failing time before the restart counted, or the pause came early", n, d, beforeRs)
		}
	}
	if d := pausedAt["api-pause"].Sub(firstAfter); d < after {
		t.Errorf("api-pause paused %s after its first abnormal answer since the restart, before pause-after", d)
	}
	if st := mustStatus(t, b, "control"); st.Paused {
		t.Errorf("control (no pause-after) paused: %+v", st)
	}
	m := metricValues(t, b)
	for _, n := range paused {
		if got, ok := m[fmt.Sprintf(`mmmq_dispatch_paused{dispatcher=%q,reason="auto"}`, n)]; !ok || got != 1 {
			t.Errorf("%s: mmmq_dispatch_paused{reason=\"auto\"} %v (present %v), want 1", n, got, ok)
		}
		if l := auditLines(b, "dispatcher paused automatically", n); len(l) != 1 {
			t.Errorf("%s: %d audit lines \"dispatcher paused automatically\", want 1:\n%s", n, len(l), strings.Join(l, "\n"))
		}
	}
	for k := range m {
		if strings.HasPrefix(k, `mmmq_dispatch_paused{dispatcher="control"`) {
			t.Errorf("control: series %s, want none", k)
		}
	}
	if rec := pauseRecords(t, root); rec["api-pause"] != "auto" || rec["cfg-pause"] != "auto" || len(rec) != 2 {
		t.Errorf("paused.json %v, want api-pause and cfg-pause, reason auto", rec)
	}
	pushesAtPause := len(c503.snapshot())

	// kill -9, restart: still paused, same reason and time.
	b.kill()
	b = startBroker(t, conf)
	checkOwnBroker(t, b, root)
	for _, n := range paused {
		st := mustStatus(t, b, n)
		if !st.Paused || st.PauseReason != "auto" || st.PausedAt == nil || !st.PausedAt.Equal(pausedAt[n]) {
			t.Errorf("%s after kill -9 and restart: paused %v, pauseReason %q, pausedAt %v; want paused, auto, %v", n, st.Paused, st.PauseReason, st.PausedAt, pausedAt[n])
		}
	}
	m = metricValues(t, b)
	for _, n := range paused {
		if got := m[fmt.Sprintf(`mmmq_dispatch_paused{dispatcher=%q,reason="auto"}`, n)]; got != 1 {
			t.Errorf("%s after the restart: mmmq_dispatch_paused{reason=\"auto\"} %v, want 1", n, got)
		}
	}
	// The consumers are back: the control delivers, the paused ones wait.
	flip.up()
	c503.setDown(false)
	cCtl.setDown(false)
	waitCommitted(t, b, []string{"control"}, topics, 8, 15*time.Second)
	time.Sleep(time.Second)
	if n := len(c503.snapshot()); n != pushesAtPause {
		t.Errorf("api-pause: %d pushes while paused, want none", n-pushesAtPause)
	}
	for _, p := range cRef.snapshot() {
		if !p.At.Before(downAt) {
			t.Errorf("cfg-pause: a push at %s after the consumers fell reached its consumer while it refused or was paused", p.At.Sub(downAt))
		}
	}

	// Resume: the admin API, and the command line.
	resumeAt := time.Now()
	resp, err := httpClient.Post(b.base+"/mmmq/dispatchers/cfg-pause/resume", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resume cfg-pause: %d %s", resp.StatusCode, body)
	}
	if code, out := cli(t, "dispatchers", "resume", "api-pause", "--server", b.base); code != 0 {
		t.Fatalf("mmmq dispatchers resume api-pause: exit %d\n%s", code, out)
	}
	waitCommitted(t, b, paused, topics, 8, 15*time.Second)
	resumed := time.Since(resumeAt)
	checkAckedInOrder(t, "cfg-pause", cRef.snapshot(), ids)
	checkAckedInOrder(t, "api-pause", c503.snapshot(), ids)
	checkAckedInOrder(t, "control", cCtl.snapshot(), ids)
	// Each resumed where it stopped: its first push after the resume is
	// offset 3 of each topic (0..2 were ACKed before the fall).
	for n, c := range map[string]*healthConsumer{"cfg-pause": cRef, "api-pause": c503} {
		firstOff := map[string]int64{}
		for _, p := range c.snapshot() {
			if _, ok := firstOff[p.Topic]; !ok && !p.At.Before(resumeAt) {
				firstOff[p.Topic] = p.Offset
			}
		}
		for _, tp := range topics {
			if off, ok := firstOff[tp]; !ok || off != 3 {
				t.Errorf("%s/%s: first push after the resume offset %d (pushed %v), want 3", n, tp, off, ok)
			}
		}
	}
	for _, n := range all {
		checkNoDeadLetters(t, b, n)
		st := mustStatus(t, b, n)
		if st.Paused || st.PauseReason != "" || st.PausedAt != nil {
			t.Errorf("%s after the resume: paused %v, pauseReason %q, pausedAt %v", n, st.Paused, st.PauseReason, st.PausedAt)
		}
		for _, tp := range st.Topics {
			if tp.DeadLettered != 0 || tp.Exhausted != 0 || tp.Committed != tp.HighWatermark {
				t.Errorf("%s/%s: committed %d of %d, exhausted %d, dead-lettered %d", n, tp.Topic, tp.Committed, tp.HighWatermark, tp.Exhausted, tp.DeadLettered)
			}
		}
	}
	for k := range metricValues(t, b) {
		if strings.HasPrefix(k, "mmmq_dispatch_paused{") {
			t.Errorf("after the resumes: series %s, want none", k)
		}
	}
	if rec := pauseRecords(t, root); len(rec) != 0 {
		t.Errorf("paused.json after the resumes %v, want empty", rec)
	}
	b.stop()
	for _, n := range paused {
		t.Logf("%s: paused %s after the restart (%s after the consumers fell), seen paused %s after the restart",
			n, pausedAt[n].Sub(restartAt).Round(time.Millisecond), pausedAt[n].Sub(downAt).Round(time.Millisecond), obs[n].Sub(restartAt).Round(time.Millisecond))
	}
	t.Logf("api-pause: paused %s after its first abnormal answer since the restart", pausedAt["api-pause"].Sub(firstAfter).Round(time.Millisecond))
	t.Logf("both resumed (API, CLI) and caught up (5 messages per topic each) in %s", resumed.Round(time.Millisecond))
}
