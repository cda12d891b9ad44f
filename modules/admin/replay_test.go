package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// A seek and a redrive with "rate" through the API: the answers and GET
// show the replay (rate, from, until) per topic; a seek without a rate
// clears it; a rate that is not a number > 0 and <= 1000000 is a 400
// naming "rate" that moves and publishes nothing.
func TestReplayRateThroughTheAPI(t *testing.T) {
	srv, nack := ackServer(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"acknowledgement":"NACK"}`)
	})
	l := startAdmin(t, newRegistry(t), t.TempDir())
	l.must("POST", "/mmmq/dispatchers", fmt.Sprintf(`{"name":"rp","host":%q,"patterns":["p.*"]}`, srv.URL), 201, nil)
	l.publish("p.a", 10)
	l.waitStatus("rp", func(st Status) bool { return len(st.Topics) == 1 && st.Topics[0].Committed == 10 })

	for _, body := range []string{
		`{"to":0,"rate":0}`, `{"to":0,"rate":-1}`, `{"to":0,"rate":1000001}`, `{"to":0,"rate":"50"}`, `{"to":0,"rate":true}`,
	} {
		code, out := l.call("POST", "/mmmq/dispatchers/rp/seek", body)
		var e struct{ Error, Code string }
		if json.Unmarshal([]byte(out), &e); code != 400 || e.Code != contract.CodeBadRequest || !strings.Contains(e.Error, `"rate"`) {
			t.Errorf("seek %s: %d %s; want 400 naming \"rate\"", body, code, out)
		}
	}
	for _, body := range []string{`{"rate":0}`, `{"rate":-3}`, `{"rate":1e7}`, `{"rate":"fast"}`, `{"rate":[1]}`} {
		code, out := l.call("POST", "/mmmq/dispatchers/rp/redrive", body)
		var e struct{ Error, Code string }
		if json.Unmarshal([]byte(out), &e); code != 400 || e.Code != contract.CodeBadRequest || !strings.Contains(e.Error, `"rate"`) {
			t.Errorf("redrive %s: %d %s; want 400 naming \"rate\"", body, code, out)
		}
	}
	if st := l.waitStatus("rp", func(Status) bool { return true }); st.Topics[0].Committed != 10 || st.Topics[0].Replay != nil {
		t.Fatalf("after the refused calls: %+v", st.Topics[0])
	}

	// One message per 1000 s: the replay stays.
	var seek struct {
		Topics []dispatcher.SeekResult `json:"topics"`
	}
	l.must("POST", "/mmmq/dispatchers/rp/seek", `{"to":"earliest","rate":0.001}`, 200, &seek)
	want := dispatcher.Replay{Rate: 0.001, From: 0, Until: 10}
	if len(seek.Topics) != 1 || seek.Topics[0].Replay == nil || *seek.Topics[0].Replay != want {
		t.Fatalf("seek answer %+v; want the replay %+v", seek.Topics, want)
	}
	st := l.waitStatus("rp", func(st Status) bool { return st.Topics[0].Committed == 1 })
	if r := st.Topics[0].Replay; r == nil || *r != want {
		t.Errorf("status replay %+v, want %+v", r, want)
	}
	_, raw := l.call("GET", "/mmmq/dispatchers/rp", "")
	if !strings.Contains(raw, `"replay":{"rate":0.001,"from":0,"until":10}`) {
		t.Errorf("GET: want \"replay\":{\"rate\":0.001,\"from\":0,\"until\":10} in %s", raw)
	}
	seek.Topics = nil
	l.must("POST", "/mmmq/dispatchers/rp/seek", `{"to":"latest"}`, 200, &seek)
	if seek.Topics[0].Replay != nil {
		t.Errorf("seek without a rate answered replay %+v", seek.Topics[0].Replay)
	}
	if st := l.waitStatus("rp", func(Status) bool { return true }); st.Topics[0].Replay != nil {
		t.Errorf("status after a seek without a rate: replay %+v", st.Topics[0].Replay)
	}

	// Two dead letters (max-resends 1: two NACKs each), redriven at a rate.
	nack.Store(true)
	l.publish("p.a", 2)
	l.waitStatus("rp", func(st Status) bool { return st.Topics[0].DeadLettered == 2 && st.Topics[0].Committed == 12 })
	nack.Store(false)
	var res dispatcher.RedriveResult
	l.must("POST", "/mmmq/dispatchers/rp/redrive", `{"rate":0.001}`, 200, &res)
	wantR := []dispatcher.TopicReplay{{Topic: "p.a", Replay: dispatcher.Replay{Rate: 0.001, From: 12, Until: 14}}}
	if len(res.Redriven) != 2 || fmt.Sprint(res.Replay) != fmt.Sprint(wantR) {
		t.Fatalf("redrive answer %+v; want 2 redriven and replay %+v", res, wantR)
	}
	st = l.waitStatus("rp", func(st Status) bool { return st.Topics[0].Committed == 13 })
	if r := st.Topics[0].Replay; r == nil || *r != wantR[0].Replay {
		t.Errorf("status after the redrive: replay %+v, want %+v", r, wantR[0].Replay)
	}
}
