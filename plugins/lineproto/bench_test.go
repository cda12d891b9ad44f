package lineproto

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
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

func benchLinePub(b *testing.B, level string, depth int) {
	root := b.TempDir()
	reg := topicqueue.New(topicqueue.Options{Root: root, Storage: storage.Options{Logger: zap.NewNop()}})
	coord := groups.New(reg, groups.Options{Logger: zap.NewNop()})
	srv := New(Options{Addr: "127.0.0.1:0", Logger: zap.NewNop()}, reg, coord)
	if err := srv.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = srv.Stop(context.Background())
		_ = coord.Stop(context.Background())
		_ = reg.Close()
	}()
	nc, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 64<<10)
	line := []byte(`PUB bench.t ` + level + ` {"order":12345,"note":"a message of about a hundred bytes, as in the other benchmarks"}` + "\n")
	burst := make([]byte, 0, depth*len(line))
	for range depth {
		burst = append(burst, line...)
	}
	roundTrip := func(n int) {
		if _, err := nc.Write(burst[:n*len(line)]); err != nil {
			b.Fatal(err)
		}
		for range n {
			reply, err := r.ReadSlice('\n')
			if err != nil || reply[0] != 'O' {
				b.Fatalf("reply %q: %v", reply, err)
			}
		}
	}
	roundTrip(1) // the topic is created
	_ = nc.SetDeadline(time.Now().Add(10 * time.Minute))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += depth {
		roundTrip(min(depth, b.N-done))
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
