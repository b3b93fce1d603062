package daemontest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xce-project/libxce/go/xce"
)

// The C scheduler dispatches to an OK worker with free CPUs, explains with a pend reason why a
// job waits (too big for every worker; no OK worker), and keeps doing so across a kill -9 of
// the primary (it re-joins from its reconnect handler).
func TestSchedulerDispatchesAndExplains(t *testing.T) {
	f := newFixture(t)
	sched := bin(t, "XCE_SCHEDULER", "build/c/daemons/xce-scheduler")
	logPath := filepath.Join(f.dir, "scheduler.log")
	logf, _ := os.Create(logPath)
	s := exec.Command(sched, "--masters", f.cl.Masters(), "--name", "st", "--poll-ms", "100")
	s.Stderr = logf
	s.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.Process.Signal(syscall.SIGTERM)
		s.Wait()
		logf.Close()
		raw, _ := os.ReadFile(logPath)
		t.Logf("scheduler log:\n%s", raw)
	}()

	// A worker host of 1 CPU, registered by a plain Go client (no jobs will finish on it).
	wk, err := xce.Start(f.ctx, xce.Config{Masters: f.cl.Masters(), ClientName: "fake-worker"})
	if err != nil {
		t.Fatal(err)
	}
	defer wk.Close()
	if _, err := wk.Join(f.ctx, xce.JoinSpec{Role: xce.RoleWorker, Host: "fw1", NCPUs: 1}); err != nil {
		t.Fatal(err)
	}

	reason := func(id uint64, want string) {
		t.Helper()
		waitFor(t, "pend reason "+want, 30*time.Second, func() bool {
			j, err := f.c.JobInfo(f.ctx, id)
			return err == nil && j.State == xce.JobPend && j.PendReason == want
		})
	}
	big, _ := f.c.JobSubmit(f.ctx, xce.JobSpec{Name: "big", Command: "true", NCPUs: 2})
	reason(big, "no OK worker has enough free CPUs (needs 2)")
	small, _ := f.c.JobSubmit(f.ctx, xce.JobSpec{Name: "small", Command: "true", NCPUs: 1})
	j := f.waitState(small, xce.JobRun)
	if j.ExecHost != "fw1" {
		t.Fatalf("dispatched to %q", j.ExecHost)
	}
	// fw1 is full now: a second small job waits for CPUs.
	small2, _ := f.c.JobSubmit(f.ctx, xce.JobSpec{Name: "small2", Command: "true"})
	reason(small2, "no OK worker has enough free CPUs (needs 1)")
	if err := f.c.HostCtrl(f.ctx, "fw1", xce.HostClose); err != nil {
		t.Fatal(err)
	}
	reason(small2, "no OK worker (1 known)")

	// Failover: the scheduler re-joins and dispatches again once a CPU is free on an OK host.
	p, _ := f.cl.Primary(10 * time.Second)
	f.cl.Kill(p)
	if err := f.c.HostCtrl(f.ctx, "fw1", xce.HostOpen); err != nil {
		t.Fatal(err)
	}
	if err := f.c.JobCtrl(f.ctx, small, xce.JobKill); err != nil { // frees fw1's CPU
		t.Fatal(err)
	}
	j = f.waitState(small2, xce.JobRun)
	if j.ExecHost != "fw1" || j.PendReason != "" {
		t.Fatalf("after the failover: %+v", j)
	}
	raw, _ := os.ReadFile(logPath)
	if !strings.Contains(string(raw), "reconnect: re-joined as SCHEDULER") {
		t.Fatal("the scheduler did not re-join after the failover")
	}
	if bj, _ := f.c.JobInfo(f.ctx, big); bj.State != xce.JobPend {
		t.Fatalf("the 2-CPU job left PEND: %+v", bj)
	}
}
