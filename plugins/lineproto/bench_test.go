package lineproto

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/plugins/metrics"
)

// BenchmarkLinePub measures one connection publishing with PUB over
// loopback TCP to a topic on the real filesystem (fsyncs included): the
// client sends depth lines in one write, then reads depth replies, and so
// on. One op is one PUB; allocs/op counts the whole process (client,
// server, storage writer), the client allocating nothing itself.
//
//	go test -run '^$' -bench LinePub -benchtime 2000x ./plugins/lineproto/
func BenchmarkLinePub(b *testing.B) {
	for _, level := range []string{"ACCEPTED", "WRITTEN", "DURABLE"} {
		for _, depth := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/depth=%d", level, depth), func(b *testing.B) {
				benchLinePub(b, level, depth)
			})
		}
	}
}

// BenchmarkLinePubObserved is BenchmarkLinePub with the metrics plugin
// observing every publish (mmmq_publish_duration_seconds, as in the
// default application): allocs/op must stay those of BenchmarkLinePub.
//
//	go test -run '^$' -bench 'LinePub(Observed)?$' -benchtime 2000x -benchmem ./plugins/lineproto/
func BenchmarkLinePubObserved(b *testing.B) {
	for _, level := range []string{"ACCEPTED", "WRITTEN", "DURABLE"} {
		for _, depth := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/depth=%d", level, depth), func(b *testing.B) {
				benchLinePubWith(b, level, depth, metrics.New())
			})
		}
	}
}

func benchLinePub(b *testing.B, level string, depth int) {
	benchLinePubWith(b, level, depth, nil)
}

// benchLinePubWith is benchLinePub over a registry with the publish
// observer obs (nil: none).
func benchLinePubWith(b *testing.B, level string, depth int, obs topicqueue.PublishObserver) {
	srv := benchServerWith(b, obs)
	p := newBenchProducer(b, srv.Addr(), level, depth)
	p.roundTrip(1) // the topic is created
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += depth {
		p.roundTrip(min(depth, b.N-done))
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkLinePubConns is the throughput of DURABLE PUB from 1 or 8
// connections to one topic, each sending depth lines per write (depth 1:
// one line per round trip, as before pipelining).
//
//	go test -run '^$' -bench LinePubConns -benchtime 4000x ./plugins/lineproto/
func BenchmarkLinePubConns(b *testing.B) {
	for _, conns := range []int{1, 8} {
		for _, depth := range []int{1, 16} {
			b.Run(fmt.Sprintf("conns=%d/depth=%d", conns, depth), func(b *testing.B) {
				srv := benchServer(b)
				ps := make([]*benchProducer, conns)
				for i := range ps {
					ps[i] = newBenchProducer(b, srv.Addr(), "DURABLE", depth)
				}
				ps[0].roundTrip(1) // the topic is created
				b.ResetTimer()
				var wg sync.WaitGroup
				for i, p := range ps {
					n := b.N / conns
					if i < b.N%conns {
						n++
					}
					wg.Go(func() {
						for done := 0; done < n; done += depth {
							p.roundTrip(min(depth, n-done))
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// benchServer starts a server over a registry on the real filesystem.
func benchServer(b *testing.B) *Server { return benchServerWith(b, nil) }

// benchServerWith is benchServer with the registry's publish observer obs
// (nil: none).
func benchServerWith(b *testing.B, obs topicqueue.PublishObserver) *Server {
	root := b.TempDir()
	reg := topicqueue.New(topicqueue.Options{Root: root, Storage: storage.Options{Logger: zap.NewNop()}, PublishObserver: obs})
	coord := groups.New(reg, groups.Options{Logger: zap.NewNop()})
	srv := New(Options{Addr: "127.0.0.1:0", Logger: zap.NewNop()}, reg, coord)
	if err := srv.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = srv.Stop(context.Background())
		_ = coord.Stop(context.Background())
		_ = reg.Close()
	})
	return srv
}

// benchProducer is one connection sending PUBs in bursts of up to depth
// lines, then reading their replies; it allocates nothing per line.
type benchProducer struct {
	b     *testing.B
	nc    net.Conn
	r     *bufio.Reader
	line  int    // bytes of one line
	burst []byte // depth lines
}

func newBenchProducer(b *testing.B, addr, level string, depth int) *benchProducer {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Minute))
	line := []byte(`PUB bench.t ` + level + ` {"order":12345,"note":"a message of about a hundred bytes, as in the other benchmarks"}` + "\n")
	p := &benchProducer{b: b, nc: nc, r: bufio.NewReaderSize(nc, 64<<10), line: len(line)}
	for range depth {
		p.burst = append(p.burst, line...)
	}
	return p
}

// roundTrip sends n lines in one write and reads their n replies.
func (p *benchProducer) roundTrip(n int) {
	if _, err := p.nc.Write(p.burst[:n*p.line]); err != nil {
		p.b.Error(err)
		return
	}
	for range n {
		reply, err := p.r.ReadSlice('\n')
		if err != nil || reply[0] != 'O' {
			p.b.Errorf("reply %q: %v", reply, err)
			return
		}
	}
}
