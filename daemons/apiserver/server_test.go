package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xce-project/libxce/daemons/internal/cluster"
	"github.com/xce-project/libxce/go/xce"
)

func controller(t *testing.T) string {
	p := os.Getenv("XCE_CONTROLLER")
	if p == "" {
		p = filepath.Join("..", "..", "target", "release", "xce-controller")
	}
	if _, err := os.Stat(p); err != nil {
		// Named by the test command (scripts/ctest.sh): missing is a failure, never a skip.
		if os.Getenv("XCE_CONTROLLER") != "" {
			t.Fatalf("no xce-controller at %s", p)
		}
		t.Skipf("no xce-controller at %s", p)
	}
	return p
}

func do(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %q", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// The API end to end against a real 3-controller cluster: every endpoint, its errors, the
// idempotent submit, and 503 "cluster not ready" once no primary can be elected.
func TestAPI(t *testing.T) {
	cl, err := cluster.Start(controller(t), t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	if _, err := cl.Primary(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := xce.Start(ctx, xce.Config{Masters: cl.Masters(), ClientName: "apiserver-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := &server{c: c, callTimeout: 30 * time.Second, reconnects: new(atomic.Uint64),
		rejoined: new(atomic.Uint64), rejoinFailed: new(atomic.Uint64)}
	ts := httptest.NewServer(s.routes())
	defer ts.Close()

	code, out := do(t, "POST", ts.URL+"/v1/jobs", `{"name":"a","command":"true"}`)
	if code != 201 || out["id"] == "" {
		t.Fatalf("submit: %d %v", code, out)
	}
	id := out["id"].(string)
	code, out = do(t, "GET", ts.URL+"/v1/jobs/"+id, "")
	if code != 200 || out["name"] != "a" || out["state"] != "PEND" || out["queue"] != "normal" || out["id"] != id {
		t.Fatalf("jobinfo: %d %v", code, out)
	}
	// Idempotent submit with a client-chosen id; a different job under that id is 409.
	body := `{"id":"4242","name":"b","command":"echo b"}`
	if code, out = do(t, "POST", ts.URL+"/v1/jobs", body); code != 201 || out["id"] != "4242" {
		t.Fatalf("submit with id: %d %v", code, out)
	}
	if code, out = do(t, "POST", ts.URL+"/v1/jobs", body); code != 200 || out["existing"] != true {
		t.Fatalf("re-post of the same job: %d %v", code, out)
	}
	if code, out = do(t, "POST", ts.URL+"/v1/jobs", `{"id":"4242","name":"b","command":"other"}`); code != 409 {
		t.Fatalf("different job, same id: %d %v", code, out)
	}
	for _, bad := range []string{`{"name":"x"}`, `{"command":"x"}`, `{"name":"x","command":"y","nope":1}`, `not json`} {
		if code, out = do(t, "POST", ts.URL+"/v1/jobs", bad); code != 400 {
			t.Errorf("bad body %s: %d %v", bad, code, out)
		}
	}
	if code, out = do(t, "GET", ts.URL+"/v1/jobs?state=PEND", ""); code != 200 || len(out["jobs"].([]any)) != 2 {
		t.Fatalf("list PEND: %d %v", code, out)
	}
	if code, out = do(t, "GET", ts.URL+"/v1/jobs?state=DONE,RUN", ""); code != 200 || len(out["jobs"].([]any)) != 0 {
		t.Fatalf("list DONE,RUN: %d %v", code, out)
	}
	if code, _ = do(t, "GET", ts.URL+"/v1/jobs?state=NOPE", ""); code != 400 {
		t.Fatalf("unknown state: %d", code)
	}
	if code, _ = do(t, "GET", ts.URL+"/v1/jobs/12345", ""); code != 404 {
		t.Fatalf("unknown job: %d", code)
	}
	if code, out = do(t, "POST", ts.URL+"/v1/jobs/"+id+"/kill", ""); code != 200 {
		t.Fatalf("kill: %d %v", code, out)
	}
	if code, _ = do(t, "GET", ts.URL+"/v1/jobs/"+id, ""); code != 200 {
		t.Fatal("jobinfo after kill")
	}
	if code, out = do(t, "POST", ts.URL+"/v1/jobs/"+id+"/resume", ""); code != 409 {
		t.Fatalf("resume of a killed job: %d %v", code, out)
	}
	if code, _ = do(t, "POST", ts.URL+"/v1/jobs/"+id+"/explode", ""); code != 404 {
		t.Fatalf("unknown action: %d", code)
	}
	if code, out = do(t, "GET", ts.URL+"/v1/workers", ""); code != 200 {
		t.Fatalf("workers: %d %v", code, out)
	}
	code, out = do(t, "GET", ts.URL+"/v1/cluster", "")
	if code != 200 || len(out["controllers"].([]any)) != 3 || out["primary_id"].(float64) < 1 {
		t.Fatalf("cluster: %d %v", code, out)
	}
	if code, out = do(t, "GET", ts.URL+"/v1/stats", ""); code != 200 {
		t.Fatalf("stats: %d %v", code, out)
	}
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"# TYPE xce_client_requests_total counter\n",
		"xce_client_current_master{addr=", `xce_apiserver_answers_total{class="2xx"} `} {
		if resp.StatusCode != 200 || !strings.Contains(string(raw), want) ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
			t.Fatalf("metrics: %d %q missing in\n%s", resp.StatusCode, want, raw)
		}
	}

	// No quorum: kill two nodes; with a short budget the answer is 503 "cluster not ready".
	if err := c.SetRetry(&xce.RetryConfig{MaxRetries: 3, InitialRetryMs: 50, MaxRetryMs: 200, BackoffMultiplier: 2}); err != nil {
		t.Fatal(err)
	}
	p, _ := cl.Primary(10 * time.Second)
	for _, n := range cl.Nodes {
		if n.ID != p {
			cl.Kill(n.ID)
			break
		}
	}
	cl.Kill(p)
	// Give the survivor time to notice there is no leader.
	time.Sleep(time.Second)
	code, out = do(t, "GET", ts.URL+"/v1/jobs", "")
	if code != 503 || out["error"] != "cluster not ready" {
		t.Fatalf("no quorum: %d %v, want 503 cluster not ready", code, out)
	}
	code, _ = do(t, "POST", ts.URL+"/v1/jobs", `{"name":"c","command":"true"}`)
	if code != 503 {
		t.Fatalf("submit without quorum: %d", code)
	}
	if s.notReady503.Load() < 2 {
		t.Fatalf("not-ready counter %d", s.notReady503.Load())
	}
}

// A body over 1 MiB is refused before it reaches the library.
func TestRequestBodyLimit(t *testing.T) {
	s := &server{callTimeout: time.Second, reconnects: new(atomic.Uint64),
		rejoined: new(atomic.Uint64), rejoinFailed: new(atomic.Uint64)}
	ts := httptest.NewServer(s.routes())
	defer ts.Close()
	big := bytes.Repeat([]byte("x"), 2<<20)
	resp, err := http.Post(ts.URL+"/v1/jobs", "application/json",
		bytes.NewReader(append([]byte(`{"name":"`), append(big, []byte(`","command":"x"}`)...)...)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("2 MiB body: %d, want 400", resp.StatusCode)
	}
}
