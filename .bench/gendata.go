//go:build ignore

// gendata fills a data directory for the startup benchmark of .bench/run.sh
// by appending to the storage package directly (no HTTP):
//
//	go run .bench/gendata.go -dir /tmp/data -topics 10 -bytes 1073741824
//
// Messages have the stored message JSON shape
// ({"topic":{"name":…},"content":…,"id":…,"timestamp":…}) with -size bytes of
// content; each topic gets bytes/topics of segment data, appended DURABLE in
// batches of 4096.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
)

func main() {
	dir := flag.String("dir", "", "data root directory (created)")
	topics := flag.Int("topics", 10, "topics (bench.startup.0 ..)")
	total := flag.Int64("bytes", 1<<30, "total segment bytes to write")
	size := flag.Int("size", 200, "content bytes per message")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "gendata: -dir is required")
		os.Exit(2)
	}
	start := time.Now()
	per := *total / int64(*topics)
	content := `{"p":"` + strings.Repeat("x", max(*size-8, 0)) + `"}`
	var wg sync.WaitGroup
	errs := make([]error, *topics)
	counts := make([]int64, *topics)
	sem := make(chan struct{}, 2)
	for t := 0; t < *topics; t++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			counts[t], errs[t] = fill(filepath.Join(*dir, "bench.startup."+strconv.Itoa(t)), content, per)
		}()
	}
	wg.Wait()
	var n int64
	for t, err := range errs {
		if err != nil {
			fmt.Fprintf(os.Stderr, "gendata: topic %d: %v\n", t, err)
			os.Exit(1)
		}
		n += counts[t]
	}
	fmt.Fprintf(os.Stderr, "gendata: %d messages, %d topics, %.0f MiB in %s\n",
		n, *topics, float64(per*int64(*topics))/(1<<20), time.Since(start).Round(time.Millisecond))
}

func fill(dir, content string, bytes int64) (int64, error) {
	l, err := storage.Open(dir, storage.Options{})
	if err != nil {
		return 0, err
	}
	topic := filepath.Base(dir)
	ts := strconv.FormatInt(time.Now().UnixMilli(), 10)
	var n int64
	batch := make([][]byte, 4096)
	for l.Stats().Bytes < bytes {
		for i := range batch {
			batch[i] = []byte(`{"topic":{"name":"` + topic + `"},"content":` + content +
				`,"id":"gen-` + strconv.FormatInt(n+int64(i), 16) + `","timestamp":` + ts + `}`)
		}
		if _, err := l.AppendBatch(context.Background(), batch, contract.Durable); err != nil {
			l.Close()
			return n, err
		}
		n += int64(len(batch))
	}
	return n, l.Close()
}
