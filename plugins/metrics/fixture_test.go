package metrics

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// memRegistryAndConsumer is a registry on a fresh MemFS at /data and a
// consumer answering every push {"acknowledgement": answer}, with its
// host; both closed when the test ends.
func memRegistryAndConsumer(t *testing.T, answer string) (*topicqueue.Registry, dispatcher.Host) {
	t.Helper()
	reg := topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: vfs.NewMem(), Logger: zaptest.NewLogger(t)}})
	t.Cleanup(func() { _ = reg.Close() })
	consumer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"acknowledgement":"` + answer + `"}`))
	}))
	t.Cleanup(consumer.Close)
	host, err := dispatcher.ParseHost(consumer.URL)
	if err != nil {
		t.Fatal(err)
	}
	return reg, host
}
