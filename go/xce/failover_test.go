package xce

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cluster is a 3-node `xce-controller cluster` on loopback.
type cluster struct {
	cmd     *exec.Cmd
	masters string
	pids    map[int]int // node id -> pid
	primary int
}

func controllerPath(t *testing.T) string {
	p := os.Getenv("XCE_CONTROLLER")
	if p == "" {
		p = filepath.Join("..", "..", "target", "release", "xce-controller")
	}
	if _, err := os.Stat(p); err != nil {
		// Named by the test command (scripts/ctest.sh): missing is a failure, never a skip.
		if os.Getenv("XCE_CONTROLLER") != "" {
			t.Fatalf("no xce-controller at %s (build it: cargo build --release -p xce-controller)", p)
		}
		t.Skipf("no xce-controller at %s (build it: cargo build --release -p xce-controller)", p)
	}
	return p
}

// freeBasePort picks a base port below Linux's ephemeral range (32768+) whose client ports
// base..base+2 and raft ports base+1000..base+1002 (the cluster command's layout) are free.
func freeBasePort(t *testing.T) int {
	seed := os.Getpid()*7919 + int(time.Now().UnixNano()%100000)
	for try := 0; try < 200; try++ {
		base := 20000 + (seed+try*131)%10000
		ok := true
		for i := 0; i < 3 && ok; i++ {
			for _, p := range []int{base + i, base + 1000 + i} {
				l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
				if err != nil {
					ok = false
					break
				}
				l.Close()
			}
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range for the cluster")
	return 0
}

var (
	nodeLine    = regexp.MustCompile(`^node (\d+) client=(\S+) pid=(\d+)`)
	primaryLine = regexp.MustCompile(`^primary (\d+) term (\d+)`)
)

func startCluster(t *testing.T, controller string) *cluster {
	dir := t.TempDir()
	cmd := exec.Command(controller, "cluster", "--nodes", "3",
		"--base-port", strconv.Itoa(freeBasePort(t)), "--data", dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &cluster{cmd: cmd, pids: map[int]int{}}
	t.Cleanup(func() { c.stop() })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			t.Logf("cluster: %s", line)
			if m := nodeLine.FindStringSubmatch(line); m != nil {
				id, _ := strconv.Atoi(m[1])
				pid, _ := strconv.Atoi(m[3])
				c.pids[id] = pid
				if c.masters != "" {
					c.masters += ","
				}
				c.masters += m[2]
			} else if m := primaryLine.FindStringSubmatch(line); m != nil && !signalled {
				c.primary, _ = strconv.Atoi(m[1])
				signalled = true
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatal("cluster did not elect a primary within 60 s")
	}
	if len(c.pids) != 3 {
		t.Fatalf("cluster printed %d nodes", len(c.pids))
	}
	return c
}

func (c *cluster) stop() {
	if c.cmd.Process == nil {
		return
	}
	c.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		for _, pid := range c.pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		<-done
	}
}

// S7 for Go: 16 goroutines share one Client while the primary is killed with SIGKILL. Every
// call must succeed (the default budget outlasts the election), every acknowledged job must
// exist exactly once afterwards, nothing may deadlock, and the whole run is bounded in time.
func TestSixteenGoroutinesThroughPrimaryKill(t *testing.T) {
	controller := controllerPath(t)
	cl := startCluster(t, controller)
	c, err := Start(bg, Config{Masters: cl.masters, ClientName: "go-failover-test"})
	if err != nil {
		t.Fatalf("Start(%s): %v", cl.masters, err)
	}
	defer c.Close()

	// F29: a client given only the primary learns the other two from it.
	only := strings.Split(cl.masters, ",")[cl.primary-1]
	one, err := Start(bg, Config{Masters: only, ClientName: "go-follow-test"})
	if err != nil {
		t.Fatalf("Start(%s): %v", only, err)
	}
	if _, err := one.Hello(bg); err != nil {
		t.Fatalf("hello: %v", err)
	}
	if m, err := one.Masters(); err != nil || len(m) != 3 || m[0] != only {
		t.Fatalf("Masters after a hello of the primary: %q, %v", m, err)
	}
	one.Close()

	const workers = 16
	const perWorker = 12
	var (
		mu        sync.Mutex
		submitted = map[uint64]string{}
		errs      []error
		wg        sync.WaitGroup
	)
	start := make(chan struct{})
	killAt := make(chan struct{})
	var killOnce sync.Once
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			<-start
			for i := 0; i < perWorker; i++ {
				if w == 0 && i == perWorker/3 {
					killOnce.Do(func() { close(killAt) })
				}
				name := fmt.Sprintf("g%d-%d", w, i)
				id, err := c.JobSubmit(bg, JobSpec{Name: name, Command: "sleep 1", NCPUs: 1})
				if err == nil {
					mu.Lock()
					submitted[id] = name
					mu.Unlock()
					var j Job
					j, err = c.JobInfo(bg, id)
					if err == nil && j.Name != name {
						err = fmt.Errorf("jobinfo %d: name %q, want %q", id, j.Name, name)
					}
				}
				if err == nil && i%4 == 0 {
					_, err = c.JobList(bg, JobFilter{Limit: 5})
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("goroutine %d call %d: %w [%s]", w, i, err, c.LastError()))
					mu.Unlock()
				}
			}
		}(w)
	}
	close(start)
	<-killAt
	pid := cl.pids[cl.primary]
	t.Logf("kill -9 primary node %d (pid %d)", cl.primary, pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill: %v", err)
	}
	killed := time.Now()

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("goroutines still blocked 120 s after the kill (deadlock?):\n%s", buf[:n])
	}
	t.Logf("all %d goroutines done %.2f s after the kill", workers, time.Since(killed).Seconds())
	for _, err := range errs {
		t.Error(err)
		if errors.Is(err, ErrInvalid) {
			t.Error("EINVAL after a failover: the old library's bug")
		}
	}
	if len(submitted) != workers*perWorker && len(errs) == 0 {
		t.Fatalf("%d jobs acknowledged, want %d", len(submitted), workers*perWorker)
	}
	// Every acknowledged job exists exactly once on the new primary.
	jobs, err := c.JobList(bg, JobFilter{})
	if err != nil {
		t.Fatalf("final joblist: %v", err)
	}
	count := map[uint64]int{}
	for _, j := range jobs {
		count[j.ID]++
	}
	for id, name := range submitted {
		if count[id] != 1 {
			t.Errorf("job %d (%s) listed %d times", id, name, count[id])
		}
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Failovers < 1 {
		t.Errorf("stats report %d failovers", st.Failovers)
	}
	t.Logf("stats: %+v", st)
}
