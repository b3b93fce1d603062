// Package daemontest drives the C daemons (build/c/daemons/) against a real cluster
// in situations the whole-system test meets only by chance.
package daemontest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xce-project/libxce/daemons/internal/cluster"
	"github.com/xce-project/libxce/go/xce"
)

func bin(t *testing.T, env, rel string) string {
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join("..", "..", rel)
	}
	if _, err := os.Stat(p); err != nil {
		// Named by the test command (scripts/ctest.sh): missing is a failure, never a skip.
		if os.Getenv("XCE_CONTROLLER") != "" {
			t.Fatalf("no %s (%s): build it first (daemons/build.sh)", p, env)
		}
		t.Skipf("no %s (%s): build it first (daemons/build.sh)", p, env)
	}
	abs, _ := filepath.Abs(p)
	return abs
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, limit)
		}
	}
}

// fixture: a cluster, a scheduler-role client, and a way to run the worker.
type fixture struct {
	t       *testing.T
	dir     string
	cl      *cluster.Cluster
	c       *xce.Client
	ctx     context.Context
	worker  string
	logPath string
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, dir: t.TempDir(), worker: bin(t, "XCE_WORKER", "build/c/daemons/xce-worker")}
	controller := bin(t, "XCE_CONTROLLER", "target/release/xce-controller")
	cl, err := cluster.Start(controller, f.dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	f.cl = cl
	if _, err := cl.Primary(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	f.ctx = ctx
	c, err := xce.Start(ctx, xce.Config{Masters: cl.Masters(), ClientName: "workertest"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	join := xce.JoinSpec{Role: xce.RoleScheduler, Host: "workertest"}
	c.SetReconnectHandler(func(h *xce.Client) error { _, err := h.Join(context.Background(), join); return err })
	if _, err := c.Join(ctx, join); err != nil {
		t.Fatal(err)
	}
	f.c = c
	f.logPath = filepath.Join(f.dir, "worker.log")
	return f
}

// startWorker starts lw1 on the fixture's state directory, its log appended to worker.log.
func (f *fixture) startWorker(extra ...string) *exec.Cmd {
	logf, err := os.OpenFile(f.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	args := append([]string{"--masters", f.cl.Masters(), "--host", "lw1", "--state-dir",
		filepath.Join(f.dir, "state"), "--poll-ms", "100", "--confirm-ms", "300"}, extra...)
	w := exec.Command(f.worker, args...)
	w.Stderr = logf
	w.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := w.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		w.Process.Signal(syscall.SIGTERM)
		w.Wait()
		logf.Close()
	})
	waitFor(f.t, "worker lw1 registered", 30*time.Second, func() bool {
		hosts, _ := f.c.WorkerList(f.ctx)
		return len(hosts) == 1 && hosts[0].Name == "lw1" && hosts[0].State == xce.HostOK
	})
	return w
}

func (f *fixture) log() string {
	raw, _ := os.ReadFile(f.logPath)
	return string(raw)
}

// run submits cmd and dispatches it to lw1.
func (f *fixture) run(name, cmd string) uint64 {
	id, err := f.c.JobSubmit(f.ctx, xce.JobSpec{Name: name, Command: cmd})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.c.JobDispatch(f.ctx, id, "lw1"); err != nil {
		f.t.Fatal(err)
	}
	return id
}

func (f *fixture) waitState(id uint64, state xce.State) xce.Job {
	var j xce.Job
	waitFor(f.t, fmt.Sprintf("job %d %s", id, state), 45*time.Second, func() bool {
		var err error
		j, err = f.c.JobInfo(f.ctx, id)
		return err == nil && j.State == state
	})
	return j
}

func (f *fixture) waitLog(what string) {
	waitFor(f.t, "worker log: "+what, 30*time.Second, func() bool { return strings.Contains(f.log(), what) })
}

// Killed with SIGKILL while a job runs, the restarted worker adopts the job from its claim:
// the job keeps running, is reported DONE once, and its command ran once.
func TestWorkerRestartAdoptsRunningJob(t *testing.T) {
	f := newFixture(t)
	w := f.startWorker()
	side := filepath.Join(f.dir, "side")
	id := f.run("long", fmt.Sprintf(`sleep 1.5; echo "$XCE_JOBID" >> %s`, side))
	f.waitLog(fmt.Sprintf("job %d started", id))
	w.Process.Signal(syscall.SIGKILL)
	w.Wait()
	f.startWorker()
	f.waitLog(fmt.Sprintf("job %d adopted", id))
	j := f.waitState(id, xce.JobDone)
	raw, _ := os.ReadFile(side)
	if strings.TrimSpace(string(raw)) != fmt.Sprint(id) {
		t.Fatalf("side effect %q, want the job id once", raw)
	}
	if n := strings.Count(f.log(), fmt.Sprintf("job %d started", id)); n != 1 {
		t.Fatalf("started %d times", n)
	}
	if j.ExitCode != 0 {
		t.Fatalf("job %+v", j)
	}
	t.Logf("worker log:\n%s", f.log())
}

// Job control through the controller reaches the process: suspend stops it (SIGSTOP), resume
// continues it, kill ends it before its side effect.
func TestWorkerFollowsJobControl(t *testing.T) {
	f := newFixture(t)
	f.startWorker()
	sideA := filepath.Join(f.dir, "a")
	a := f.run("suspended", fmt.Sprintf(`sleep 0.5; echo a >> %s`, sideA))
	f.waitLog(fmt.Sprintf("job %d started", a))
	if err := f.c.JobCtrl(f.ctx, a, xce.JobSuspend); err != nil {
		t.Fatal(err)
	}
	f.waitLog(fmt.Sprintf("job %d suspended", a))
	time.Sleep(1500 * time.Millisecond)
	if _, err := os.Stat(sideA); err == nil {
		t.Fatal("the suspended job ran on")
	}
	if err := f.c.JobCtrl(f.ctx, a, xce.JobResume); err != nil {
		t.Fatal(err)
	}
	f.waitState(a, xce.JobDone)
	if raw, _ := os.ReadFile(sideA); string(raw) != "a\n" {
		t.Fatalf("side effect of the resumed job: %q", raw)
	}

	sideB := filepath.Join(f.dir, "b")
	b := f.run("killed", fmt.Sprintf(`sleep 2; echo b >> %s`, sideB))
	f.waitLog(fmt.Sprintf("job %d started", b))
	if err := f.c.JobCtrl(f.ctx, b, xce.JobKill); err != nil {
		t.Fatal(err)
	}
	f.waitLog(fmt.Sprintf("job %d is no longer ours on the controller: killed", b))
	time.Sleep(2500 * time.Millisecond)
	if _, err := os.Stat(sideB); err == nil {
		t.Fatal("the killed job's command ran to its end")
	}
	if j, _ := f.c.JobInfo(f.ctx, b); j.State != xce.JobExit {
		t.Fatalf("killed job: %+v", j)
	}
}

// F12 (amended): a finish notify that lands in a primary frozen before handling it is not
// lost: it waits in the context's outbox and the library re-sends it, with the same request
// id, to the new primary after the reconnect. The job here freezes the primary (SIGSTOP) as
// its last act; the job must end DONE exactly once, without the worker re-sending the notify
// itself and without running the job again.
func TestWorkerResendsLostNotify(t *testing.T) {
	f := newFixture(t)
	// A long poll: the worker is asleep when the job ends, and its first act on waking is the
	// report (not a listing that would notice the frozen primary first).
	f.startWorker("--poll-ms", "3000")
	p, err := f.cl.Primary(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	side := filepath.Join(f.dir, "side")
	id := f.run("freeze-primary", fmt.Sprintf(`sleep 0.2; kill -STOP %d; echo "$XCE_JOBID" >> %s`,
		f.cl.Node(p).Pid(), side))
	j := f.waitState(id, xce.JobDone)
	raw, _ := os.ReadFile(side)
	if strings.TrimSpace(string(raw)) != fmt.Sprint(id) {
		t.Fatalf("side effect %q, want the job id once", raw)
	}
	if strings.Contains(f.log(), fmt.Sprintf("job %d notify re-sent", id)) {
		t.Fatalf("the worker had to re-send its notify: the outbox lost it")
	}
	if strings.Count(f.log(), fmt.Sprintf("job %d started", id)) != 1 {
		t.Fatal("the job was started more than once")
	}
	if j.ExitCode != 0 || j.ExecHost != "lw1" {
		t.Fatalf("job %+v", j)
	}
	f.cl.Kill(p) // the frozen primary, with the first send of the notify in its socket buffer
	t.Logf("worker log:\n%s", f.log())
}
