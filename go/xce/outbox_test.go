package xce

import (
	"context"
	"testing"
	"time"
)

// F12 (amended): a heartbeat is accepted into the outbox and acknowledged by the primary.
func TestFlushAndOutboxDepth(t *testing.T) {
	cl := startCluster(t, controllerPath(t))
	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()
	wk, err := Start(ctx, Config{Masters: cl.masters, ClientName: "go-outbox-worker"})
	if err != nil {
		t.Fatal(err)
	}
	defer wk.Close()
	if _, err := wk.Join(ctx, JoinSpec{Role: RoleWorker, Host: "gob1", NCPUs: 2, MemMB: 512}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := wk.Heartbeat(ctx, "gob1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := wk.Flush(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := wk.OutboxDepth(); n != 0 || err != nil {
		t.Fatalf("outbox depth after flush: %d %v", n, err)
	}
	if OutboxMax != 128 {
		t.Fatalf("OutboxMax %d", OutboxMax)
	}
}
