package xce

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// waitJob polls JobInfo until cond holds (fire-and-forget ops apply asynchronously).
func waitJob(t *testing.T, c *Client, id uint64, what string, cond func(Job) bool) Job {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, err := c.JobInfo(bg, id)
		if err == nil && cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d: %s not reached within 20 s (last %+v, %v)", id, what, j, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Every op of the C API through the Go package, against a real cluster: a worker session, a
// scheduler session, and a plain client.
func TestEveryOp(t *testing.T) {
	cl := startCluster(t, controllerPath(t))
	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()
	wk, err := Start(ctx, Config{Masters: cl.masters, ClientName: "go-ops-worker"})
	if err != nil {
		t.Fatal(err)
	}
	defer wk.Close()
	sc, err := Start(ctx, Config{Masters: cl.masters, ClientName: "go-ops-scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()

	info, err := wk.Hello(ctx)
	if err != nil || info.Role != CtrlPrimary || info.Version == "" || info.ProtocolVersion == 0 {
		t.Fatalf("hello: %+v %v", info, err)
	}
	// Worker-only ops before joining: AUTH.
	if err := wk.UpdateResvals(ctx, "gw1", nil); !errors.Is(err, ErrAuth) {
		t.Fatalf("update_resvals without a session: %v", err)
	}
	sid, err := wk.Join(ctx, JoinSpec{Role: RoleWorker, Host: "gw1", NCPUs: 2, MemMB: 512,
		Attrs: map[string]string{"rack": "r1", "gpu": "no"}})
	if err != nil || sid == 0 {
		t.Fatalf("join: %d %v", sid, err)
	}
	if _, err := sc.Join(ctx, JoinSpec{Role: RoleScheduler, Host: "gsched"}); err != nil {
		t.Fatal(err)
	}
	if err := wk.Heartbeat(ctx, "gw1"); err != nil {
		t.Fatal(err)
	}
	if err := wk.Nop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wk.UpdateResvals(ctx, "gw1", []ResVal{{"r1m", "0.50"}, {"licence", "3"}}); err != nil {
		t.Fatal(err)
	}
	rv, err := wk.ResVal(ctx, "gw1")
	if err != nil || len(rv) != 2 {
		t.Fatalf("resval: %+v %v", rv, err)
	}
	if _, err := wk.ResVal(ctx, "nohost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("resval of an unknown host: %v", err)
	}
	res, err := wk.ResList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, r := range res {
		names[r.Name] = r.Kind
	}
	if names["ncpus"] != "numeric" || names["licence"] == "" {
		t.Fatalf("reslist: %+v", res)
	}
	hosts, err := wk.WorkerList(ctx)
	if err != nil || len(hosts) != 1 || hosts[0].Name != "gw1" || hosts[0].State != HostOK ||
		hosts[0].NCPUs != 2 || hosts[0].Attrs["rack"] != "r1" || hosts[0].LastHeartbeat.IsZero() {
		t.Fatalf("workerlist: %+v %v", hosts, err)
	}
	cc, err := wk.ClusterConf(ctx)
	if err != nil || len(cc.Controllers) != 3 || cc.PrimaryID == 0 || len(cc.Queues) == 0 ||
		cc.Queues[0].Name != "normal" || !cc.Queues[0].Open {
		t.Fatalf("clusterconf: %+v %v", cc, err)
	}

	// A job through its life: reason, dispatch, start, usage, finish.
	id, err := wk.JobSubmit(ctx, JobSpec{Name: "life", Command: "true", User: "u1", NCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.SetPendReason(ctx, id, "waiting for gw1"); err != nil {
		t.Fatal(err)
	}
	if j, _ := wk.JobInfo(ctx, id); j.PendReason != "waiting for gw1" || j.User != "u1" {
		t.Fatalf("pend reason: %+v", j)
	}
	if err := sc.ClearReason(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := sc.JobDispatch(ctx, id, "gw1"); err != nil {
		t.Fatal(err)
	}
	if err := sc.JobDispatch(ctx, id, "gw1"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("second dispatch: %v", err)
	}
	if j, _ := wk.JobInfo(ctx, id); j.State != JobRun || j.ExecHost != "gw1" || j.PendReason != "" {
		t.Fatalf("after dispatch: %+v", j)
	}
	if err := wk.NotifyJobStart(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := wk.NotifyJobChkpt(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := wk.UpdateJUsage(ctx, id, Usage{CPUMs: 1234, MemKB: 5678}); err != nil {
		t.Fatal(err)
	}
	if err := wk.NotifyJobFinish(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, wk, id, "DONE", func(j Job) bool { return j.State == JobDone })
	if j.Usage != (Usage{1234, 5678}) || j.EndTime.IsZero() || j.ExitCode != 0 {
		t.Fatalf("finished job: %+v", j)
	}

	// A failing job, a stopped one, and job control.
	id2, _ := wk.JobSubmit(ctx, JobSpec{Name: "fail", Command: "false"})
	if err := sc.JobDispatch(ctx, id2, "gw1"); err != nil {
		t.Fatal(err)
	}
	if err := wk.NotifyJobStop(ctx, id2); err != nil {
		t.Fatal(err)
	}
	waitJob(t, wk, id2, "SUSP", func(j Job) bool { return j.State == JobSusp })
	if err := wk.JobCtrl(ctx, id2, JobResume); err != nil {
		t.Fatal(err)
	}
	if err := wk.NotifyJobFail(ctx, id2, 3); err != nil {
		t.Fatal(err)
	}
	waitJob(t, wk, id2, "EXIT 3", func(j Job) bool { return j.State == JobExit && j.ExitCode == 3 })
	if err := wk.Notify(ctx, NotifyJobFinish, id2, 0); err != nil { // dropped by the controller
		t.Fatal(err)
	}
	if err := wk.JobCtrl(ctx, id2, JobRequeue); err != nil {
		t.Fatal(err)
	}
	if err := wk.JobCtrl(ctx, id2, JobSuspend); err != nil {
		t.Fatal(err)
	}
	if err := wk.JobCtrl(ctx, id2, JobKill); err != nil {
		t.Fatal(err)
	}
	if err := wk.JobCtrl(ctx, id2, JobKill); !errors.Is(err, ErrInvalid) {
		t.Fatalf("kill of a killed job: %v", err)
	}
	if _, err := wk.JobInfo(ctx, 999); !errors.Is(err, ErrNotFound) {
		t.Fatalf("jobinfo of an unknown job: %v", err)
	}
	if le, ok := wk.LastErrorInfo(); !ok || le.Status != -int(syscall.ENOENT) || len(le.MasterStatus) != 3 {
		t.Fatalf("last error: %+v %v", le, ok)
	}
	if !strings.Contains(wk.LastError(), "No such file") && wk.LastError() == "" {
		t.Fatalf("last error text %q", wk.LastError())
	}

	// Lists and filters.
	all, err := wk.JobList(ctx, JobFilter{})
	if err != nil || len(all) != 2 {
		t.Fatalf("joblist: %d %v", len(all), err)
	}
	done, _ := wk.JobList(ctx, JobFilter{StateMask: 1 << JobDone})
	if len(done) != 1 || done[0].ID != id {
		t.Fatalf("joblist DONE: %+v", done)
	}
	if mine, _ := wk.JobList(ctx, JobFilter{User: "u1"}); len(mine) != 1 {
		t.Fatalf("joblist user u1: %+v", mine)
	}
	if _, err := wk.JobList(ctx, JobFilter{StateMask: 1 << 9}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad state mask: %v", err)
	}

	// Queue and host control, tasks.
	if err := wk.QueueCtrl(ctx, "normal", QueueClose); err != nil {
		t.Fatal(err)
	}
	if _, err := wk.JobSubmit(ctx, JobSpec{Name: "x", Command: "true"}); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("submit to a closed queue: %v", err)
	}
	if err := wk.QueueCtrl(ctx, "normal", QueueOpen); err != nil {
		t.Fatal(err)
	}
	if err := wk.QueueCtrl(ctx, "nope", QueueOpen); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown queue: %v", err)
	}
	if err := wk.HostCtrl(ctx, "gw1", HostClose); err != nil {
		t.Fatal(err)
	}
	if h, _ := wk.WorkerList(ctx); h[0].State != HostClosed {
		t.Fatalf("closed host: %+v", h)
	}
	if err := wk.HostCtrl(ctx, "gw1", HostOpen); err != nil {
		t.Fatal(err)
	}
	tid, err := wk.RunTask(ctx, "gw1", "uptime")
	if err != nil || tid == 0 {
		t.Fatalf("runtask: %d %v", tid, err)
	}
	if woke, err := wk.TryWakeup(); err != nil || woke {
		t.Fatalf("try_wakeup with nothing blocked: %v %v", woke, err)
	}
	st, err := wk.Stats()
	if err != nil || st.Requests < 20 || st.CurrentMaster < 0 || st.CurrentMasterAddr == "" {
		t.Fatalf("stats: %+v %v", st, err)
	}
}

// The reconnect handler written in Go re-joins after a kill -9 of the primary (a worker-only
// op succeeds afterwards only if it did), the event handler sees the failover, the log sink
// gets the library's lines, and a handler's ErrNotReady fails the attempt (the call retries).
func TestHooksThroughFailover(t *testing.T) {
	cl := startCluster(t, controllerPath(t))
	var mu sync.Mutex
	var lines []string
	if err := SetLogHandler(func(level int, msg string) {
		mu.Lock()
		lines = append(lines, msg)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	prev, err := SetLogLevel(LogInfo)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		SetLogLevel(prev)
		SetLogHandler(nil)
	}()
	if _, err := SetLogLevel(99); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad log level: %v", err)
	}

	c, err := Start(bg, Config{Masters: cl.masters, ClientName: "go-hooks"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	join := JoinSpec{Role: RoleWorker, Host: "ghook", NCPUs: 1}
	var calls, failedFirst int
	if err := c.SetReconnectHandler(func(h *Client) error {
		calls++ // runs on the reconnecting call's goroutine, one at a time
		if calls == 1 {
			failedFirst++
			return ErrNotReady // the attempt fails and is retried after a backoff
		}
		if _, err := h.Join(bg, join); err != nil {
			return err
		}
		// Ops on the handler's view run on the new connection.
		return h.Heartbeat(bg, "ghook")
	}); err != nil {
		t.Fatal(err)
	}
	var events []Event
	if err := c.SetEventHandler(func(ev Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
		if _, err := c.Stats(); err != nil { // allowed inside the event handler
			t.Errorf("stats in the event handler: %v", err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Join(bg, join); err != nil {
		t.Fatal(err)
	}
	if err := c.UpdateResvals(bg, "ghook", []ResVal{{"k", "1"}}); err != nil {
		t.Fatal(err)
	}
	pid := cl.pids[cl.primary]
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Needs the WORKER session on the new primary's connection: only a re-join gives it.
	if err := c.UpdateResvals(bg, "ghook", []ResVal{{"k", "2"}}); err != nil {
		t.Fatalf("worker op after the failover: %v [%s]", err, c.LastError())
	}
	if calls < 2 || failedFirst != 1 {
		t.Fatalf("reconnect handler calls %d (first failed %d)", calls, failedFirst)
	}
	mu.Lock()
	defer mu.Unlock()
	kinds := map[EventKind]int{}
	for _, ev := range events {
		kinds[ev.Kind]++
	}
	if kinds[EventFailoverStarted] < 1 || kinds[EventFailoverFinished] < 1 {
		t.Fatalf("events: %+v", events)
	}
	for _, ev := range events {
		if ev.Kind == EventFailoverFinished && (ev.To == "" || ev.Duration <= 0) {
			t.Fatalf("failover-finished event without target or duration: %+v", ev)
		}
	}
	if len(lines) == 0 {
		t.Fatal("the log sink got no line")
	}
	t.Logf("%d reconnect handler calls, events %v, %d log lines (first: %q)", calls, kinds, len(lines), lines[0])
	// Handlers can be removed.
	if err := c.SetReconnectHandler(nil); err != nil {
		t.Fatal(err)
	}
	if err := c.SetEventHandler(nil); err != nil {
		t.Fatal(err)
	}
}
