package jscluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/plugins/jetstream/jscluster"
)

// An R3 stream on a real 3-node cluster keeps taking and serving writes
// while its leader is SIGKILLed and while the node the client is connected
// to is frozen (SIGSTOP); the killed node, restarted on its data, catches up
// on every message.
func TestR3StreamSurvivesKillStopAndRestart(t *testing.T) {
	c := jscluster.Start(t, 3)
	require.Len(t, c.URLs(), 3)
	for i := range 3 {
		require.NotZero(t, c.Pid(i))
	}

	// Short pings: a client connected to a frozen (SIGSTOPped) server keeps
	// its TCP connection and only a missed PONG makes it move on (the
	// default is 2 pings 2 minutes apart).
	nc, err := nats.Connect(strings.Join(c.URLs(), ","),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(2*time.Second),
		nats.PingInterval(250*time.Millisecond), nats.MaxPingsOutstanding(2))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A just-formed cluster may leave a request unanswered while its routes
	// settle (seen under a loaded CI run): each attempt is bounded and
	// retried, the whole within ctx.
	var s jetstream.Stream
	require.Eventually(t, func() bool {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		s, err = js.CreateStream(actx, jetstream.StreamConfig{
			Name: "ORDERS", Subjects: []string{"orders.>"}, Replicas: 3, Storage: jetstream.FileStorage,
		})
		return err == nil
	}, 60*time.Second, 100*time.Millisecond, "create the R3 stream")

	// publish sends message k until it is acknowledged, with its id as
	// Nats-Msg-Id so that a retry of a write whose ack was lost is not
	// stored twice (the stream's duplicate window is 2 minutes).
	retries := 0
	publish := func(from, to int) {
		t.Helper()
		for k := from; k <= to; k++ {
			deadline := time.Now().Add(20 * time.Second)
			for {
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				ack, err := js.Publish(pctx, "orders.created", fmt.Appendf(nil, "m%d", k), jetstream.WithMsgID(fmt.Sprintf("id-%d", k)))
				pcancel()
				if err == nil {
					require.EqualValues(t, k, ack.Sequence, "message %d", k)
					break
				}
				require.True(t, time.Now().Before(deadline), "message %d not acknowledged in 20 s: %v", k, err)
				retries++
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	// readAll reads messages 1..n back, in order.
	readAll := func(n int) {
		t.Helper()
		for k := 1; k <= n; k++ {
			deadline := time.Now().Add(20 * time.Second)
			for {
				gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
				m, err := s.GetMsg(gctx, uint64(k))
				gcancel()
				if err == nil {
					require.Equal(t, fmt.Sprintf("m%d", k), string(m.Data))
					break
				}
				require.True(t, time.Now().Before(deadline), "message %d not readable in 20 s: %v", k, err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}

	publish(1, 40)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.NotNil(t, info.Cluster)
	leader := c.Index(info.Cluster.Leader)
	require.GreaterOrEqual(t, leader, 0, "stream leader %q", info.Cluster.Leader)

	c.Kill(leader)
	require.Zero(t, c.Pid(leader))
	publish(41, 80)
	readAll(80)
	t.Logf("stream leader %s killed: messages 41..80 acknowledged after %d retries", c.Name(leader), retries)

	c.Restart(leader)
	require.NotZero(t, c.Pid(leader))

	// Freeze the node the client is connected to: the client must notice
	// (missed PONGs) and the other two must go on.
	frozen := c.Index(nc.ConnectedServerName())
	require.GreaterOrEqual(t, frozen, 0, "connected to %q", nc.ConnectedServerName())
	c.Stop(frozen)
	retries = 0
	publish(81, 100)
	c.Cont(frozen)
	t.Logf("node %s frozen: messages 81..100 acknowledged after %d retries", c.Name(frozen), retries)
	readAll(100)

	info, err = s.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 100, info.State.Msgs)
	require.EqualValues(t, 100, info.State.LastSeq)
	// Every replica holds the 100 messages, the restarted one included
	// (what the node's own /jsz reports from its store).
	for i := range 3 {
		require.Eventually(t, func() bool { return jszMessages(t, c.MonitorURL(i)) == 100 }, 15*time.Second, 100*time.Millisecond,
			"node %s holds %d messages", c.Name(i), jszMessages(t, c.MonitorURL(i)))
	}
}

func jszMessages(t *testing.T, mon string) uint64 {
	resp, err := http.Get(mon + "/jsz")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var v struct {
		Messages uint64 `json:"messages"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return 0
	}
	return v.Messages
}

// Start fails the test at once, saying why, when nats-server cannot run:
// the file is not executable, or the process exits at startup (its output
// quoted).
func TestStartFailsClearlyWhenTheBinaryCannotRun(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	require.NoError(t, os.WriteFile(notExec, []byte("not a program\n"), 0o644))
	exits := filepath.Join(dir, "exits")
	require.NoError(t, os.WriteFile(exits, []byte("#!/bin/sh\necho 'nats-server: boom, no such option' >&2\nexit 3\n"), 0o755))

	for _, tc := range []struct {
		bin  string
		want []string
	}{
		{notExec, []string{"node n1", "cannot run " + notExec, "permission denied"}},
		{exits, []string{"node n1", "exited at startup: exit status 3", "boom, no such option"}},
	} {
		t.Run(filepath.Base(tc.bin), func(t *testing.T) {
			start := time.Now()
			ft := &fakeTB{TB: t}
			ft.run(func() {
				jscluster.StartOptions(ft, 3, jscluster.Options{Binary: tc.bin, ReadyTimeout: 10 * time.Second})
			})
			require.NotEmpty(t, ft.fatal, "Start did not fail")
			for _, w := range tc.want {
				require.Contains(t, ft.fatal, w)
			}
			require.Less(t, time.Since(start), 5*time.Second, "Start should fail at once")
			t.Logf("Start failed with: %s", ft.fatal)
		})
	}
}

// fakeTB records a Fatalf instead of failing the real test.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	fatal    string
	cleanups []func()
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal != ""
}
func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

// run calls fn on its own goroutine (Fatalf ends it), then the cleanups.
func (f *fakeTB) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}
