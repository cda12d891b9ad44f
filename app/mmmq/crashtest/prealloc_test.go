package crashtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPreallocCleanStopAndKill runs the real binary with
// mmmq.broker.storage.preallocate at its default (on) and checks the
// on-disk contract:
//
//   - while it runs under traffic, a topic's active segment and index
//     carry a zero tail (preallocation is really on);
//   - after a clean stop (SIGTERM) every segment and index file ends
//     exactly at its last entry, as the original Java mmmq reads them;
//   - after a kill -9 the active files keep their zero tails, `mmmq
//     verify` exits 0 and names them, `mmmq dump` shows every
//     acknowledged message; the restart cuts them
//     (every file ends at its last entry again), every acknowledged
//     message is served, and `mmmq verify` then reports every topic OK.
func TestPreallocCleanStopAndKill(t *testing.T) {
	root := filepath.Join(t.TempDir(), "data")
	conf := brokerConf{DataDir: root, SegmentMaxBytes: 256 << 10}
	topics := []string{"pre.a", "pre.b"}
	var acked []sentMsg

	b := startBroker(t, conf)
	acked = append(acked, preTraffic(t, b, topics, 0)...)
	if !preZeroTails(t, root, topics) {
		t.Fatal("no active segment carries a zero tail under traffic: preallocation is not on")
	}
	b.stop()
	preEndsAtLastEntry(t, root, "after a clean stop")

	b = startBroker(t, conf)
	stop := make(chan struct{})
	var more []sentMsg
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			more = append(more, preTraffic(t, b, topics, i)...)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !preZeroTails(t, root, topics) {
		if time.Now().After(deadline) {
			t.Fatal("no zero tail to kill the broker with")
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.kill()
	close(stop)
	wg.Wait()
	acked = append(acked, more...)
	if !preZeroTails(t, root, topics) {
		t.Fatal("the killed broker left no zero tail")
	}
	// ZERO_TAIL when zeros are all the kill left; TORN_TAIL when a group
	// commit was also caught between its segment and index writes.
	out, code := mmmqVerify(t, root)
	if code != 0 || !strings.Contains(out, "bytes of zeros after the last entry") || !strings.Contains(out, "ZERO_TAIL") && !strings.Contains(out, "TORN_TAIL") {
		t.Fatalf("mmmq verify after kill -9: exit %d, want 0 naming the zero tails:\n%s", code, out)
	}

	// dump reads the killed broker's files as the restart will serve them:
	// every acknowledged message of the topic, none of the zeros.
	for _, topic := range topics {
		out, err := exec.Command(binPath, "dump", "--root", root, "--topic", topic).CombinedOutput()
		if err != nil {
			t.Fatalf("mmmq dump %s after kill -9: %v\n%s", topic, err, out)
		}
		for _, m := range acked {
			if m.Topic == topic && !strings.Contains(string(out), m.ID) {
				t.Fatalf("mmmq dump %s after kill -9 lacks acknowledged %s:\n%.2000s", topic, m.ID, out)
			}
		}
	}

	b = startBroker(t, conf)
	preEndsAtLastEntry(t, root, "after the restart")
	for _, topic := range topics {
		got, err := readAll(b.base, topic)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, m := range got {
			have[m.ID] = true
		}
		for _, m := range acked {
			if m.Topic == topic && !have[m.ID] {
				t.Fatalf("%s: acknowledged message %s lost", topic, m.ID)
			}
		}
	}
	b.stop()
	if out, code := mmmqVerify(t, root); code != 0 || strings.Contains(out, "ZERO_TAIL") || strings.Contains(out, "TORN_TAIL") {
		t.Fatalf("mmmq verify after the restart: exit %d:\n%s", code, out)
	}
	t.Logf("%d messages acknowledged, all served; zero tails cut at the restart", len(acked))
}

// preTraffic publishes 40 DURABLE messages to each topic from 8 producers
// at once (so that group commits follow each other closely: the topics
// are busy) and returns the acknowledged ones.
func preTraffic(t *testing.T, b *broker, topics []string, round int) []sentMsg {
	var mu sync.Mutex
	var out []sentMsg
	var wg sync.WaitGroup
	for p := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				topic := topics[(p+i)%len(topics)]
				id := fmt.Sprintf("r%d-p%d-%d", round, p, i)
				content := []byte(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 200+i*37%400)))
				r := publish(b.base, topic, id, content, "durable")
				if r.Ack {
					mu.Lock()
					out = append(out, sentMsg{Topic: topic, ID: id, Level: "durable", Content: content, Res: r})
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// preZeroTails reports whether the active (newest) segment of any of the
// topics ends in zeros in both its .mmm and its .idx: a preallocated
// tail (an entry ends with its JSON's last byte, never zero).
func preZeroTails(t *testing.T, root string, topics []string) bool {
	t.Helper()
	for _, topic := range topics {
		mmms, _ := filepath.Glob(filepath.Join(root, topic, "*.mmm"))
		if len(mmms) == 0 {
			continue
		}
		last := mmms[len(mmms)-1]
		m, err1 := os.ReadFile(last)
		x, err2 := os.ReadFile(strings.TrimSuffix(last, ".mmm") + ".idx")
		if err1 == nil && err2 == nil && zeroEnd(m, 64) && zeroEnd(x, 64) {
			return true
		}
	}
	return false
}

func zeroEnd(b []byte, n int) bool {
	return len(b) >= n && bytes.Count(b[len(b)-n:], []byte{0}) == n
}

// preEndsAtLastEntry fails unless every segment under root holds exactly
// its entries back to back (int32 BE length | uint32 CRC | JSON, length =
// 4 + len(JSON)) and its index exactly their positions (int64 BE).
func preEndsAtLastEntry(t *testing.T, root, when string) {
	t.Helper()
	mmms, err := filepath.Glob(filepath.Join(root, "*", "*.mmm"))
	if err != nil || len(mmms) == 0 {
		t.Fatalf("%s: no segments under %s (%v)", when, root, err)
	}
	for _, path := range mmms {
		seg, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := os.ReadFile(strings.TrimSuffix(path, ".mmm") + ".idx")
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		for pos := 0; pos < len(seg); {
			if len(seg)-pos < 10 {
				t.Fatalf("%s: %s: %d trailing bytes at %d are no entry", when, path, len(seg)-pos, pos)
			}
			n := int(binary.BigEndian.Uint32(seg[pos:]))
			if n < 6 || pos+4+n > len(seg) {
				t.Fatalf("%s: %s: no entry at byte %d of %d (length field %d): a tail after the last entry", when, path, pos, len(seg), n)
			}
			want = binary.BigEndian.AppendUint64(want, uint64(pos))
			pos += 4 + n
		}
		if !bytes.Equal(idx, want) {
			t.Fatalf("%s: %s.idx is %d bytes, want exactly %d (one position per entry)", when, strings.TrimSuffix(path, ".mmm"), len(idx), len(want))
		}
	}
}

// mmmqVerify runs `mmmq verify <root>` and returns its output and exit code.
func mmmqVerify(t *testing.T, root string) (string, int) {
	t.Helper()
	out, err := exec.Command(binPath, "verify", root).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("mmmq verify: %v", err)
	}
	return string(out), 0
}
