package crashtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// httpClient is for every request of the harness: 127.0.0.1 only, bounded.
var httpClient = &http.Client{
	Timeout: 10 * time.Second,
	Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     5 * time.Second,
	},
}

// pubResult is what a publish got back.
type pubResult struct {
	// Replied is true when an HTTP answer arrived (ACK or NACK); false when
	// the connection died first (outcome unknown).
	Replied bool
	Status  int
	Ack     bool
	Offset  int64 // -1 unless ACK at WRITTEN or DURABLE
	Level   string
	Err     string
	// Duplicate: the broker answered that the id was already published
	// within the dedup window (nothing stored; Offset is the first one's).
	Duplicate bool
}

// publish posts one message; content must be compact JSON (the broker
// stores it compacted, so read-back bytes are comparable).
func publish(base, topic, id string, content []byte, level string) pubResult {
	return publishKey(base, topic, id, "", content, level)
}

// publishKey is publish with an ordering key ("key"; none when "").
func publishKey(base, topic, id, key string, content []byte, level string) pubResult {
	body, _ := json.Marshal(struct {
		Topic   string          `json:"topic"`
		Content json.RawMessage `json:"content"`
		ID      string          `json:"id"`
		Key     string          `json:"key,omitempty"`
	}{topic, content, id, key})
	resp, err := httpClient.Post(base+"/messages?ack="+level, "application/json", bytes.NewReader(body))
	if err != nil {
		return pubResult{Offset: -1, Err: err.Error()}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return pubResult{Offset: -1, Err: err.Error()}
	}
	var v struct {
		Acknowledgement string `json:"acknowledgement"`
		Offset          *int64 `json:"offset"`
		Level           string `json:"level"`
		Error           string `json:"error"`
		Duplicate       bool   `json:"duplicate"`
	}
	r := pubResult{Replied: true, Status: resp.StatusCode, Offset: -1}
	if err := json.Unmarshal(data, &v); err != nil {
		r.Err = fmt.Sprintf("bad reply %d %q", resp.StatusCode, data)
		return r
	}
	r.Ack = resp.StatusCode == http.StatusOK && v.Acknowledgement == "ACK"
	r.Level, r.Err, r.Duplicate = v.Level, v.Error, v.Duplicate
	if v.Offset != nil {
		r.Offset = *v.Offset
	}
	return r
}

// stored is one message of the log as read back.
type stored struct {
	Raw     []byte // the stored message JSON, exactly
	ID      string
	Topic   string
	Content []byte
	Headers map[string]string // the message headers ("headers"), nil when none
}

func parseStored(raw []byte) (stored, error) {
	var v struct {
		Topic struct {
			Name string `json:"name"`
		} `json:"topic"`
		Content json.RawMessage   `json:"content"`
		ID      string            `json:"id"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return stored{}, err
	}
	return stored{Raw: append([]byte(nil), raw...), ID: v.ID, Topic: v.Topic.Name, Content: []byte(v.Content), Headers: v.Headers}, nil
}

// readAll reads the whole visible log of topic through
// GET /topics/{topic}/messages. A missing topic is an empty log. Every
// page must start where the previous ended and hold no corrupt item.
func readAll(base, topic string) ([]stored, error) {
	var out []stored
	for page := 0; page < 100000; page++ {
		url := fmt.Sprintf("%s/topics/%s/messages?offset=%d&limit=1000", base, topic, len(out))
		resp, err := httpClient.Get(url)
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusNotFound && len(out) == 0 {
			return nil, nil
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, data)
		}
		var v struct {
			Messages []struct {
				Offset  int64           `json:"offset"`
				Message json.RawMessage `json:"message"`
				Error   string          `json:"error"`
			} `json:"messages"`
			HighWatermark int64 `json:"highWatermark"`
		}
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("GET %s: %v", url, err)
		}
		for _, m := range v.Messages {
			if m.Offset != int64(len(out)) {
				return nil, fmt.Errorf("topic %s: offset %d where %d was expected (offsets not contiguous)", topic, m.Offset, len(out))
			}
			if m.Error != "" {
				return nil, fmt.Errorf("topic %s offset %d: read error %s", topic, m.Offset, m.Error)
			}
			s, err := parseStored(m.Message)
			if err != nil {
				return nil, fmt.Errorf("topic %s offset %d: %v", topic, m.Offset, err)
			}
			if s.Topic != topic {
				return nil, fmt.Errorf("topic %s offset %d: stored topic %q", topic, m.Offset, s.Topic)
			}
			out = append(out, s)
		}
		if int64(len(out)) >= v.HighWatermark || len(v.Messages) == 0 {
			if int64(len(out)) != v.HighWatermark {
				return nil, fmt.Errorf("topic %s: read %d messages, high watermark %d", topic, len(out), v.HighWatermark)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("topic %s: too many pages", topic)
}
