package dispatcher

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// CloudEvents 1.0 HTTP binary-mode headers (WithCloudEvents), sent in
// exactly this (lower) case.
const (
	HeaderCESpecVersion = "ce-specversion" // always "1.0"
	HeaderCEID          = "ce-id"          // the message id (or "<topic>-<offset>" without one)
	HeaderCESource      = "ce-source"      // "mmmq://<node name>/<topic>"
	HeaderCEType        = "ce-type"        // the topic
	HeaderCETime        = "ce-time"        // the stored timestamp, RFC 3339 in UTC with milliseconds
)

// setCloudEvents sets the CloudEvents binary-mode attributes of d on h.
func setCloudEvents(h http.Header, d Delivery, node string) {
	id := d.MessageID
	if id == "" || !contract.ValidHeaderValue(id) {
		id = d.Topic + "-" + strconv.FormatInt(d.Offset, 10)
	}
	h[HeaderCESpecVersion] = []string{"1.0"}
	h[HeaderCEID] = []string{id}
	h[HeaderCESource] = []string{"mmmq://" + node + "/" + d.Topic}
	h[HeaderCEType] = []string{d.Topic}
	if ts, ok := contract.MessageTimestamp(d.Body); ok {
		h[HeaderCETime] = []string{time.UnixMilli(ts).UTC().Format("2006-01-02T15:04:05.000Z07:00")}
	}
}

// contentOf returns the "content" member of a stored message JSON (the
// event data of a binary-mode CloudEvent); "null" when it has none.
func contentOf(stored []byte) []byte {
	var m struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(stored, &m); err != nil || m.Content == nil {
		return []byte("null")
	}
	return m.Content
}
