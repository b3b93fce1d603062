// xce-systest: the whole-system failover test. Real processes only: 3 xce-controller nodes,
// the C worker (x2) and scheduler, the Go apiserver. Jobs are submitted over HTTP, each a real
// command with a side effect (it appends its job id to a file of its own); while they flow the
// primary controller is killed with SIGKILL K times (and started again), and one worker is
// killed and restarted once.
//
//	xce-systest --controller BIN --worker BIN --scheduler BIN --apiserver BIN
//	            [--jobs 40] [--kills 3] [--timeline] [--keep]
//	XCE_LONG=1: 200 jobs through 20 kills (unless --jobs/--kills say otherwise).
//
// Pass: every job ends DONE exactly once, each command ran exactly once (its side-effect file
// has exactly one line), no job is stuck, every daemon's reconnect handler re-joined after
// its failovers, and the apiserver answered only 2xx or 503 "cluster not ready". It prints a
// table (and with --timeline, what happens as it happens) and exits 0 on pass, 1 on failure.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xce-project/libxce/daemons/internal/cluster"
	"github.com/xce-project/libxce/go/xce"
)

var (
	t0       = time.Now()
	timeline bool
	evMu     sync.Mutex
)

// event prints one timeline line (with --timeline) and keeps it for the failure report.
func event(format string, args ...any) {
	line := fmt.Sprintf("%+8.2fs  %s", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
	evMu.Lock()
	defer evMu.Unlock()
	if timeline {
		fmt.Println(line)
	}
}

// proc is one daemon process with its log.
type proc struct {
	name    string
	args    []string
	cmd     *exec.Cmd
	done    chan struct{}
	mu      sync.Mutex
	summary string      // its "summary …" line
	listen  chan string // apiserver: the address it listens on
	onLine  func(p *proc, line string)
	logPath string
}

var summaryRe = regexp.MustCompile(`summary (.*)$`)

func (p *proc) start() error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Stdout = logf
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd = cmd
	p.done = make(chan struct{})
	go func(done chan struct{}) {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if m := summaryRe.FindStringSubmatch(line); m != nil {
				p.mu.Lock()
				p.summary = m[1]
				p.mu.Unlock()
			}
			if p.onLine != nil {
				p.onLine(p, line)
			}
		}
		cmd.Wait()
		logf.Close()
		close(done)
	}(p.done)
	return nil
}

func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Signal(sig)
	}
}

// stop sends SIGTERM and waits up to 15 s; true when it exited 0 by itself.
func (p *proc) stop() bool {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode() == 0
	case <-time.After(15 * time.Second):
		p.signal(syscall.SIGKILL)
		<-p.done
		return false
	}
}

func (p *proc) summaryFields() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for _, kv := range strings.Fields(p.summary) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			n, _ := strconv.Atoi(v)
			out[k] = n
		}
	}
	return out
}

// jobRec is one submitted job as the test knows it.
type jobRec struct {
	n        int
	id       uint64
	firstTry time.Time
	acked    time.Time
	sleep    time.Duration
}

// apiJob is what GET /v1/jobs returns per job.
type apiJob struct {
	ID         uint64 `json:"id,string"`
	Name       string `json:"name"`
	State      string `json:"state"`
	ExecHost   string `json:"exec_host"`
	ExitCode   int    `json:"exit_code"`
	SubmitTime int64  `json:"submit_time"`
	StartTime  int64  `json:"start_time"`
	EndTime    int64  `json:"end_time"`
}

// httpStats counts every answer of the apiserver the test saw.
type httpStats struct {
	mu       sync.Mutex
	ok       int
	notReady int
	other    []string
	last503  time.Time
}

func (h *httpStats) record(code int, body []byte, what string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case code >= 200 && code < 300:
		h.ok++
	case code == 503 && bytes.Contains(body, []byte(`"cluster not ready"`)):
		h.notReady++
		h.last503 = time.Now()
	default:
		h.other = append(h.other, fmt.Sprintf("%s: %d %s", what, code, strings.TrimSpace(string(body))))
	}
}

type killRec struct {
	n         int
	node      int
	at        time.Time
	newNode   int
	elected   time.Time
	restarted time.Time
}

func main() {
	controller := flag.String("controller", "", "xce-controller binary")
	worker := flag.String("worker", "", "xce-worker binary")
	scheduler := flag.String("scheduler", "", "xce-scheduler binary")
	apiserver := flag.String("apiserver", "", "xce-apiserver binary")
	njobs := flag.Int("jobs", 0, "jobs to submit (default 40; 200 with XCE_LONG=1)")
	nkills := flag.Int("kills", 0, "kills of the primary (default 3; 20 with XCE_LONG=1)")
	keep := flag.Bool("keep", false, "keep the work directory")
	flag.BoolVar(&timeline, "timeline", false, "print what happens as it happens")
	flag.Parse()
	long := os.Getenv("XCE_LONG") != "" && os.Getenv("XCE_LONG") != "0"
	if *njobs == 0 {
		*njobs = 40
		if long {
			*njobs = 200
		}
	}
	if *nkills == 0 {
		*nkills = 3
		if long {
			*nkills = 20
		}
	}
	for _, b := range []string{*controller, *worker, *scheduler, *apiserver} {
		if b == "" {
			flag.Usage()
			os.Exit(2)
		}
		if _, err := os.Stat(b); err != nil {
			fmt.Fprintf(os.Stderr, "xce-systest: %v\n", err)
			os.Exit(2)
		}
	}
	dir, err := os.MkdirTemp("", "xce-systest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ok := run(dir, *controller, *worker, *scheduler, *apiserver, *njobs, *nkills)
	if ok && !*keep {
		os.RemoveAll(dir)
	} else {
		fmt.Printf("logs kept in %s\n", dir)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(dir, controllerBin, workerBin, schedulerBin, apiBin string, njobs, nkills int) bool {
	var failures []string
	fail := func(format string, args ...any) {
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	side := filepath.Join(dir, "side")
	os.MkdirAll(side, 0o755)

	// Controllers. The library's own logs (the probe client) are quiet unless they matter.
	xce.SetLogLevel(xce.LogError)
	cl, err := cluster.Start(controllerBin, dir, 3)
	if err != nil {
		fmt.Printf("FAIL: start cluster: %v\n", err)
		return false
	}
	defer cl.Stop()
	primary, err := cl.Primary(60 * time.Second)
	if err != nil {
		fmt.Printf("FAIL: %v\n", err)
		return false
	}
	masters := cl.Masters()

	// Daemons.
	var rejoinMu sync.Mutex
	rejoins := map[string]int{}
	onLine := func(p *proc, line string) {
		switch {
		case strings.Contains(line, "reconnect: re-joined"):
			rejoinMu.Lock()
			rejoins[p.name]++
			rejoinMu.Unlock()
			event("%s re-joined from its reconnect handler", p.name)
		case strings.Contains(line, "reconnect: re-join failed"):
			event("%s: %s", p.name, line[strings.Index(line, "reconnect:"):])
		case strings.Contains(line, "adopted from the previous worker"):
			event("%s: %s", p.name, line[strings.Index(line, "job "):])
		case strings.Contains(line, "listening on http://"):
			if p.listen != nil {
				p.listen <- strings.TrimPrefix(line[strings.Index(line, "http://"):], "http://")
			}
		}
	}
	api := &proc{name: "apiserver", listen: make(chan string, 1), onLine: onLine,
		logPath: filepath.Join(dir, "apiserver.log"),
		args:    []string{apiBin, "--masters", masters, "--listen", "127.0.0.1:0", "--call-timeout", "60s"}}
	sched := &proc{name: "scheduler", onLine: onLine, logPath: filepath.Join(dir, "scheduler.log"),
		args: []string{schedulerBin, "--masters", masters, "--name", "sched", "--poll-ms", "100"}}
	newWorker := func(host string) *proc {
		return &proc{name: host, onLine: onLine, logPath: filepath.Join(dir, host+".log"),
			args: []string{workerBin, "--masters", masters, "--host", host, "--state-dir",
				filepath.Join(dir, "state-"+host), "--ncpus", "3", "--poll-ms", "100",
				"--confirm-ms", "300", "--attr", "rack=r1"}}
	}
	workers := []*proc{newWorker("w1"), newWorker("w2")}
	all := append([]*proc{api, sched}, workers...)
	for _, p := range all {
		if err := p.start(); err != nil {
			fmt.Printf("FAIL: start %s: %v\n", p.name, err)
			return false
		}
	}
	defer func() {
		for _, p := range all {
			p.signal(syscall.SIGKILL)
		}
	}()
	var addr string
	select {
	case addr = <-api.listen:
	case <-time.After(60 * time.Second):
		fmt.Println("FAIL: the apiserver did not listen within 60 s")
		return false
	}
	base := "http://" + addr
	event("cluster up: primary node %d of 3; apiserver %s, scheduler, workers w1 w2", primary, base)

	hs := &httpStats{}
	client := &http.Client{Timeout: 90 * time.Second}
	call := func(method, path string, body []byte) (int, []byte, error) {
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		hs.record(resp.StatusCode, raw, method+" "+path)
		return resp.StatusCode, raw, nil
	}

	// Wait until both workers are known and OK, so the first jobs do not wait for them.
	for deadline := time.Now().Add(60 * time.Second); ; {
		code, raw, _ := call("GET", "/v1/workers", nil)
		if code == 200 && bytes.Count(raw, []byte(`"state":"OK"`)) == 2 {
			break
		}
		if time.Now().After(deadline) {
			fmt.Println("FAIL: workers not OK within 60 s")
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The schedule: kills every killEvery, jobs spread over the kills, the worker restart
	// between the middle kills.
	const killEvery = 2500 * time.Millisecond
	const firstKill = 1500 * time.Millisecond
	span := firstKill + time.Duration(nkills)*killEvery
	gap := span / time.Duration(njobs)
	start := time.Now()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))

	jobs := make([]*jobRec, njobs)
	var jobsMu sync.Mutex
	var wg sync.WaitGroup
	submitted := 0

	// Submitter: one goroutine per job at its time; a 503 is retried (same id: idempotent).
	wg.Add(1)
	go func() {
		defer wg.Done()
		var sub sync.WaitGroup
		for i := 0; i < njobs; i++ {
			time.Sleep(time.Until(start.Add(time.Duration(i) * gap)))
			j := &jobRec{n: i, id: xce.NewJobID(), firstTry: time.Now(),
				sleep: time.Duration(100+rng.Intn(400)) * time.Millisecond}
			jobsMu.Lock()
			jobs[i] = j
			jobsMu.Unlock()
			sub.Add(1)
			go func(j *jobRec) {
				defer sub.Done()
				cmd := fmt.Sprintf(`sleep %.3f; echo "$XCE_JOBID $XCE_EXEC_HOST" >> %s/%d`,
					j.sleep.Seconds(), side, j.n)
				body, _ := json.Marshal(map[string]any{"id": strconv.FormatUint(j.id, 10),
					"name": fmt.Sprintf("sys-%d", j.n), "command": cmd})
				for {
					code, _, err := call("POST", "/v1/jobs", body)
					if err == nil && (code == 201 || code == 200) {
						jobsMu.Lock()
						j.acked = time.Now()
						submitted++
						jobsMu.Unlock()
						return
					}
					if err != nil {
						hs.mu.Lock()
						hs.other = append(hs.other, fmt.Sprintf("POST /v1/jobs: %v", err))
						hs.mu.Unlock()
					}
					time.Sleep(100 * time.Millisecond)
				}
			}(j)
		}
		sub.Wait()
	}()

	// Killer: SIGKILL the primary, wait for the next one, start the old one again.
	var kills []*killRec
	var killsMu sync.Mutex
	restartW1 := nkills / 2
	if restartW1 == 0 {
		restartW1 = 1
	}
	var w1Restart, w1Back time.Time
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := 1; k <= nkills; k++ {
			time.Sleep(time.Until(start.Add(firstKill + time.Duration(k-1)*killEvery)))
			p, err := cl.Primary(60 * time.Second)
			if err != nil {
				fail("kill %d: %v", k, err)
				return
			}
			kr := &killRec{n: k, node: p}
			pid := cl.Node(p).Pid()
			cl.Kill(p)
			kr.at = time.Now()
			killsMu.Lock()
			kills = append(kills, kr)
			killsMu.Unlock()
			event("KILL -9 primary node %d (pid %d)  [kill %d/%d]", p, pid, k, nkills)
			np, err := cl.Primary(60 * time.Second)
			if err != nil {
				fail("kill %d: no new primary: %v", k, err)
				return
			}
			kr.newNode, kr.elected = np, time.Now()
			event("new primary node %d, %d ms after the kill", np, kr.elected.Sub(kr.at).Milliseconds())
			time.Sleep(300 * time.Millisecond)
			if err := cl.Restart(p); err != nil {
				fail("restart node %d: %v", p, err)
				return
			}
			kr.restarted = time.Now()
			event("node %d started again (it rejoins as a standby)", p)
			if k == restartW1 {
				// The worker restart, between two kills.
				time.Sleep(killEvery / 3)
				w := workers[0]
				w.signal(syscall.SIGKILL)
				<-w.done
				w1Restart = time.Now()
				event("KILL -9 worker w1 (its running jobs keep running)")
				time.Sleep(700 * time.Millisecond)
				nw := newWorker("w1")
				if err := nw.start(); err != nil {
					fail("restart w1: %v", err)
					return
				}
				workers[0] = nw
				w1Back = time.Now()
				all = append(all, nw)
				event("worker w1 started again on its state directory")
			}
		}
	}()

	// Poller: the state counts, as a client of the API would watch them.
	deadline := start.Add(span + 120*time.Second)
	if njobs > 100 {
		deadline = deadline.Add(5 * time.Minute)
	}
	var final []apiJob
	lastLine := ""
	for {
		time.Sleep(250 * time.Millisecond)
		code, raw, err := call("GET", "/v1/jobs", nil)
		if err == nil && code == 200 {
			var out struct{ Jobs []apiJob }
			if json.Unmarshal(raw, &out) == nil {
				final = out.Jobs
			}
			count := map[string]int{}
			for _, j := range final {
				count[j.State]++
			}
			jobsMu.Lock()
			n := submitted
			jobsMu.Unlock()
			line := fmt.Sprintf("submitted %3d/%d   PEND %3d  RUN %3d  DONE %3d  EXIT %d", n, njobs,
				count["PEND"], count["RUN"], count["DONE"], count["EXIT"])
			if line != lastLine {
				event("%s", line)
				lastLine = line
			}
			if n == njobs && count["DONE"]+count["EXIT"] >= njobs {
				break
			}
		}
		if time.Now().After(deadline) {
			fail("not every job finished within %v", deadline.Sub(start).Round(time.Second))
			break
		}
	}
	wg.Wait()
	event("all jobs ended; stopping the daemons (SIGTERM)")

	// Stop the daemons; collect their summaries.
	for _, p := range []*proc{api, sched, workers[0], workers[1]} {
		if !p.stop() {
			fail("%s did not exit 0 after SIGTERM", p.name)
		}
	}

	// ---- verdicts
	byID := map[uint64]int{}
	state := map[uint64]apiJob{}
	for _, j := range final {
		byID[j.ID]++
		state[j.ID] = j
	}
	doneOnce, stuck, ranOnce := 0, 0, 0
	var stuckList []string
	for _, j := range jobs {
		if j == nil {
			stuck++
			continue
		}
		a, ok := state[j.id]
		switch {
		case !ok || byID[j.id] != 1:
			fail("job %d (%d): listed %d times", j.n, j.id, byID[j.id])
		case a.State == "DONE" && a.ExitCode == 0:
			doneOnce++
		default:
			stuck++
			stuckList = append(stuckList, fmt.Sprintf("job %d (%d) %s exit %d on %q", j.n, j.id, a.State, a.ExitCode, a.ExecHost))
		}
		raw, err := os.ReadFile(filepath.Join(side, strconv.Itoa(j.n)))
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if err != nil || len(lines) != 1 || !strings.HasPrefix(lines[0], strconv.FormatUint(j.id, 10)+" ") {
			fail("job %d (%d): side effect %q (want its id exactly once)", j.n, j.id, string(raw))
		} else {
			ranOnce++
		}
	}
	if len(final) != njobs {
		fail("the cluster lists %d jobs, %d were submitted", len(final), njobs)
	}
	if doneOnce != njobs {
		fail("%d of %d jobs DONE", doneOnce, njobs)
	}
	for _, s := range stuckList {
		fail("stuck: %s", s)
	}

	// Every reconnect handler re-joined: per daemon process, re-joins >= its failovers >= 1.
	type rj struct {
		name                                   string
		rejoined, failed, failovers, reconnect int
	}
	var rjs []rj
	for _, p := range all {
		f := p.summaryFields()
		if p.summary == "" {
			if p.cmd.ProcessState != nil && !p.cmd.ProcessState.Exited() {
				continue // the killed w1: no summary
			}
			fail("%s printed no summary", p.name)
			continue
		}
		r := rj{p.name, f["rejoined"], f["rejoin_failed"], f["failovers"], f["reconnects"]}
		rjs = append(rjs, r)
		if r.rejoined < r.failovers || r.rejoined < 1 {
			fail("%s: %d re-joins for %d failovers", p.name, r.rejoined, r.failovers)
		}
		if r.reconnect != r.rejoined+r.failed {
			fail("%s: %d reconnects, %d re-joins + %d failed", p.name, r.reconnect, r.rejoined, r.failed)
		}
	}
	af := api.summaryFields()
	if af["answers_other"] != 0 {
		fail("the apiserver counted %d answers other than 2xx / 503 not ready", af["answers_other"])
	}
	hs.mu.Lock()
	for _, o := range hs.other {
		fail("HTTP answer other than 2xx / 503 cluster not ready: %s", o)
	}
	hs.mu.Unlock()

	// ---- the longest wait a failover caused
	// A job's latency is submit→end on the controller. Baseline: the median latency minus
	// the command's own sleep, over jobs whose life overlapped no kill and no worker restart.
	// A kill's cost to a job is its extra latency over that baseline.
	overlap := func(a apiJob, t time.Time) bool {
		ms := t.UnixMilli()
		return a.SubmitTime <= ms && ms <= a.EndTime
	}
	var calm []int64
	var worstKill, worstW1 int64
	var worstKillJob, worstW1Job int
	for _, j := range jobs {
		if j == nil {
			continue
		}
		a, ok := state[j.id]
		if !ok || a.State != "DONE" {
			continue
		}
		extra := a.EndTime - a.SubmitTime - j.sleep.Milliseconds()
		hitKill := false
		for _, k := range kills {
			if overlap(a, k.at) {
				hitKill = true
			}
		}
		hitW1 := !w1Restart.IsZero() && a.SubmitTime <= w1Back.UnixMilli() && w1Restart.UnixMilli() <= a.EndTime && a.ExecHost == "w1"
		switch {
		case hitW1:
			if extra > worstW1 {
				worstW1, worstW1Job = extra, j.n
			}
		case hitKill:
			if extra > worstKill {
				worstKill, worstKillJob = extra, j.n
			}
		default:
			calm = append(calm, extra)
		}
	}
	sort.Slice(calm, func(a, b int) bool { return calm[a] < calm[b] })
	var median int64
	if len(calm) > 0 {
		median = calm[len(calm)/2]
	}
	var worstSubmit time.Duration
	worstSubmitJob := -1
	for _, j := range jobs {
		if j != nil && !j.acked.IsZero() && j.acked.Sub(j.firstTry) > worstSubmit {
			worstSubmit, worstSubmitJob = j.acked.Sub(j.firstTry), j.n
		}
	}

	// ---- report
	fmt.Println()
	fmt.Println("whole-system test: 3 controllers, 2 C workers (w1 killed and restarted once), the C scheduler, the Go apiserver")
	fmt.Println()
	fmt.Println("| jobs | kills of the primary | DONE exactly once | commands run exactly once (side effects) | stuck | HTTP 2xx | HTTP 503 not ready | HTTP other |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|")
	hs.mu.Lock()
	fmt.Printf("| %d | %d | %d | %d | %d | %d | %d | %d |\n", njobs, len(kills), doneOnce, ranOnce, stuck,
		hs.ok, hs.notReady, len(hs.other))
	hs.mu.Unlock()
	fmt.Println()
	fmt.Println("| daemon | failovers seen | reconnect handler calls | re-joined | re-join failed (retried) |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, r := range rjs {
		fmt.Printf("| %s | %d | %d | %d | %d |\n", r.name, r.failovers, r.reconnect, r.rejoined, r.failed)
	}
	fmt.Println()
	var elect []int64
	for _, k := range kills {
		if !k.elected.IsZero() {
			elect = append(elect, k.elected.Sub(k.at).Milliseconds())
		}
	}
	sort.Slice(elect, func(a, b int) bool { return elect[a] < elect[b] })
	fmt.Println("| measure | value |")
	fmt.Println("|---|---:|")
	if len(elect) > 0 {
		fmt.Printf("| kill → new primary answers (min / median / max) | %d / %d / %d ms |\n", elect[0], elect[len(elect)/2], elect[len(elect)-1])
	}
	fmt.Printf("| job latency without a kill, median (submit → DONE, minus the command's sleep) | %d ms |\n", median)
	fmt.Printf("| longest extra wait of a job whose life spanned a kill (job %d) | %d ms |\n", worstKillJob, max64(worstKill-median, 0))
	fmt.Printf("| longest submit over HTTP, first try → 2xx (job %d) | %d ms |\n", worstSubmitJob, worstSubmit.Milliseconds())
	if !w1Restart.IsZero() {
		fmt.Printf("| longest extra wait of a w1 job across the worker's restart (job %d) | %d ms |\n", worstW1Job, max64(worstW1-median, 0))
	}
	fmt.Printf("| time of the run | %.1f s |\n", time.Since(start).Seconds())
	fmt.Println()
	if len(failures) > 0 {
		for _, f := range failures {
			fmt.Println("FAIL:", f)
		}
		fmt.Println("system: FAILED")
		return false
	}
	fmt.Println("system: PASS — every job DONE exactly once, every command ran once, no job stuck, every reconnect re-joined, only 2xx / 503 not-ready answers")
	return true
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
