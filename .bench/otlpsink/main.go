// otlpsink is the OTLP/HTTP receiver of .bench/tracing.sh: it answers
// every POST /v1/traces with 200 and an empty application/x-protobuf body
// (an empty ExportTraceServiceResponse: everything accepted) and counts the
// requests, their body bytes and the spans in them. GET /stats prints the
// counts as one JSON line. Nothing is kept.
//
//	go build -o otlpsink ./.bench/otlpsink && ./otlpsink -listen 127.0.0.1:4318
package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"sync/atomic"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:4318", "listen address")
	flag.Parse()
	var requests, bytes, spans, bad atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		requests.Add(1)
		bytes.Add(int64(len(body)))
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			bad.Add(1) // not protobuf (a gzip body, say): counted, still accepted
		} else {
			n := 0
			for _, rs := range req.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					n += len(ss.Spans)
				}
			}
			spans.Add(int64(n))
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int64{
			"requests": requests.Load(), "bytes": bytes.Load(), "spans": spans.Load(), "undecoded": bad.Load(),
		})
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
