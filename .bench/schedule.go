//go:build ignore

// schedule measures scheduled messages on a running broker (.bench/schedule.sh
// starts one): -n messages published with "deliverAt" spread evenly over
// the next -over on one topic, by -c producers; a consumer (an exclusive
// group fetching with a long poll) takes them as they enter the topic and
// measures each one's lateness from its deliverAt (in its content). Prints
// the broker's VmRSS/VmHWM (/proc/<pid>/status) before, after the
// schedules and at the end, the schedule throughput, and lateness
// p50/p99/max; a message taken before its deliverAt counts as early.
//
//	go run .bench/schedule.go -url http://127.0.0.1:8080 -pid 1234 -n 100000 -over 1m
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "", "broker base URL")
	pid := flag.Int("pid", 0, "broker process id (for VmRSS/VmHWM)")
	n := flag.Int("n", 100000, "messages to schedule")
	over := flag.Duration("over", time.Minute, "due times spread over this span from the start")
	c := flag.Int("c", 32, "producers")
	lead := flag.Duration("lead", 2*time.Second, "first due time after the start (room for the schedules)")
	topic := flag.String("topic", "sched-bench", "topic")
	flag.Parse()
	if *url == "" || *pid == 0 {
		fmt.Fprintln(os.Stderr, "schedule: -url and -pid are required")
		os.Exit(2)
	}
	rss0, hwm0 := mem(*pid)
	fmt.Printf("broker before: VmRSS %d MiB, VmHWM %d MiB\n", rss0>>10, hwm0>>10)

	start := time.Now()
	first := start.Add(*lead)
	step := *over / time.Duration(*n)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *c}}

	var got atomic.Int64
	lat := make([]time.Duration, 0, *n)
	var latMu sync.Mutex
	early := 0
	worst := map[int]time.Duration{} // second of the run (by due time) → its latest message
	done := make(chan struct{})
	go func() { // consumer
		defer close(done)
		session := ""
		seen := map[int64]bool{}
		for len(seen) < *n {
			req, _ := http.NewRequest(http.MethodPost, *url+"/topics/"+*topic+"/groups/bench/fetch?max=1000&wait=1000", nil)
			if session != "" {
				req.Header.Set("mmmq-session", session)
			}
			resp, err := client.Do(req)
			if err != nil {
				fmt.Fprintln(os.Stderr, "fetch:", err)
				time.Sleep(10 * time.Millisecond)
				continue
			}
			now := time.Now()
			var page struct {
				Session  string `json:"session"`
				Messages []struct {
					Offset  int64 `json:"offset"`
					Message struct {
						Content struct {
							Due int64 `json:"due"`
						} `json:"content"`
					} `json:"message"`
				} `json:"messages"`
			}
			code := resp.StatusCode
			err = json.NewDecoder(resp.Body).Decode(&page)
			resp.Body.Close()
			switch {
			case code == http.StatusNotFound:
				time.Sleep(2 * time.Millisecond) // the topic is made by the first move
				continue
			case code != http.StatusOK || err != nil:
				fmt.Fprintf(os.Stderr, "fetch: HTTP %d %v; new session\n", code, err)
				session = ""
				continue
			}
			session = page.Session
			latMu.Lock()
			for _, m := range page.Messages {
				if seen[m.Offset] {
					continue
				}
				seen[m.Offset] = true
				d := now.Sub(time.UnixMilli(m.Message.Content.Due))
				if d < 0 {
					early++
				}
				lat = append(lat, d)
				sec := int(time.UnixMilli(m.Message.Content.Due).Sub(start) / time.Second)
				worst[sec] = max(worst[sec], d)
			}
			latMu.Unlock()
			got.Store(int64(len(seen)))
		}
	}()

	var next atomic.Int64
	var errs atomic.Int64
	var wg sync.WaitGroup
	for range *c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(*n) {
					return
				}
				due := first.Add(time.Duration(i) * step).UnixMilli()
				body := fmt.Sprintf(`{"topic":%q,"content":{"i":%d,"due":%d},"deliverAt":%d}`, *topic, i, due, due)
				resp, err := client.Post(*url+"/messages", "application/json", strings.NewReader(body))
				if err != nil {
					errs.Add(1)
					continue
				}
				var b bytes.Buffer
				b.ReadFrom(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !bytes.Contains(b.Bytes(), []byte(`"scheduled":true`)) {
					if errs.Add(1) == 1 {
						fmt.Fprintf(os.Stderr, "schedule: HTTP %d %s\n", resp.StatusCode, b.String())
					}
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	rss1, hwm1 := mem(*pid)
	fmt.Printf("scheduled %d in %v (%.0f/s, %d producers, %d errors); due %v .. %v after the start\n",
		*n, took.Round(time.Millisecond), float64(*n)/took.Seconds(), *c, errs.Load(), lead.Round(time.Millisecond), (*lead + *over).Round(time.Millisecond))
	fmt.Printf("broker after the schedules: VmRSS %d MiB, VmHWM %d MiB\n", rss1>>10, hwm1>>10)
	// A deliverAt already past when it arrives is an ordinary publish: not
	// "scheduled", counted in the errors above.
	select {
	case <-done:
	case <-time.After(*lead + *over + 2*time.Minute):
		fmt.Printf("timeout: %d of %d delivered\n", got.Load(), *n)
	}
	rss2, hwm2 := mem(*pid)
	latMu.Lock()
	defer latMu.Unlock()
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	fmt.Printf("delivered %d of %d: early %d; lateness from deliverAt p50 %v, p99 %v, max %v (consumer: exclusive group fetch, wait=1000)\n",
		len(lat), *n, early, q(0.50).Round(time.Millisecond), q(0.99).Round(time.Millisecond), q(1).Round(time.Millisecond))
	var slow []string
	for sec, d := range worst {
		if d > 500*time.Millisecond {
			slow = append(slow, fmt.Sprintf("%ds:%v", sec, d.Round(time.Millisecond)))
		}
	}
	slices.Sort(slow)
	fmt.Printf("seconds (by due time, from the start) with a message over 500ms late: %d %v\n", len(slow), slow)
	fmt.Printf("broker at the end: VmRSS %d MiB, VmHWM %d MiB; RSS growth %+d MiB (VmHWM growth %+d MiB)\n",
		rss2>>10, hwm2>>10, (max(rss1, rss2)-rss0)>>10, (hwm2-hwm0)>>10)
	if early > 0 || len(lat) < *n {
		os.Exit(1)
	}
}

// mem returns VmRSS and VmHWM of pid in KiB.
func mem(pid int) (rss, hwm int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var v int64
		if k, rest, ok := strings.Cut(sc.Text(), ":"); ok {
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &v)
			switch k {
			case "VmRSS":
				rss = v
			case "VmHWM":
				hwm = v
			}
		}
	}
	return rss, hwm
}
