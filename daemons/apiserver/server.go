package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xce-project/libxce/go/xce"
)

// server answers the JSON API with one shared *xce.Client for every request.
type server struct {
	c           *xce.Client
	callTimeout time.Duration
	// Counters of answers by class, for /v1/stats and the summary line.
	ok2xx, notReady503, other atomic.Uint64
	// Reconnect handler counters (set by main).
	reconnects, rejoined, rejoinFailed *atomic.Uint64
}

// JobJSON is a job on the wire. Ids are decimal strings: they use all 64 bits, more than a
// JSON number keeps exactly in most clients.
type JobJSON struct {
	ID         uint64    `json:"id,string"`
	Name       string    `json:"name"`
	User       string    `json:"user"`
	Queue      string    `json:"queue"`
	Command    string    `json:"command"`
	NCPUs      uint32    `json:"ncpus"`
	MemMB      uint64    `json:"mem_mb"`
	State      string    `json:"state"`
	PendReason string    `json:"pend_reason,omitempty"`
	ExecHost   string    `json:"exec_host,omitempty"`
	SubmitTime int64     `json:"submit_time"`
	StartTime  int64     `json:"start_time"`
	EndTime    int64     `json:"end_time"`
	ExitCode   int       `json:"exit_code"`
	Usage      UsageJSON `json:"usage"`
}

// UsageJSON is a job's resource usage.
type UsageJSON struct {
	CPUMs uint64 `json:"cpu_ms"`
	MemKB uint64 `json:"mem_kb"`
}

// unixMs is t in Unix milliseconds, 0 for the zero time (the API's JSON keeps numbers).
func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func jobJSON(j xce.Job) JobJSON {
	return JobJSON{ID: j.ID, Name: j.Name, User: j.User, Queue: j.Queue, Command: j.Command,
		NCPUs: j.NCPUs, MemMB: j.MemMB, State: j.State.String(),
		PendReason: j.PendReason, ExecHost: j.ExecHost, SubmitTime: unixMs(j.SubmitTime),
		StartTime: unixMs(j.StartTime), EndTime: unixMs(j.EndTime), ExitCode: j.ExitCode,
		Usage: UsageJSON{CPUMs: j.Usage.CPUMs, MemKB: j.Usage.MemKB}}
}

// SubmitJSON is the body of POST /v1/jobs. ID is optional: with one, the submit is idempotent
// (re-posting the same job answers 200 with "existing": true), which is what a client that
// retries after a 503 needs.
type SubmitJSON struct {
	ID      uint64 `json:"id,string,omitempty"`
	Name    string `json:"name"`
	Command string `json:"command"`
	User    string `json:"user,omitempty"`
	Queue   string `json:"queue,omitempty"`
	NCPUs   uint32 `json:"ncpus,omitempty"`
	MemMB   uint64 `json:"mem_mb,omitempty"`
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		s.reply(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/v1/jobs", s.jobs)
	mux.HandleFunc("/v1/jobs/", s.job)
	mux.HandleFunc("/v1/workers", s.get(func(ctx context.Context) (any, error) {
		hosts, err := s.c.WorkerList(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]map[string]any, 0, len(hosts))
		for _, h := range hosts {
			out = append(out, map[string]any{"name": h.Name, "state": xce.HostStateName(h.State),
				"ncpus": h.NCPUs, "mem_mb": h.MemMB, "njobs": h.NJobs, "attrs": h.Attrs,
				"last_heartbeat": unixMs(h.LastHeartbeat)})
		}
		return map[string]any{"workers": out}, nil
	}))
	mux.HandleFunc("/v1/cluster", s.get(func(ctx context.Context) (any, error) {
		cc, err := s.c.ClusterConf(ctx)
		if err != nil {
			return nil, err
		}
		ctrls := make([]map[string]any, 0, len(cc.Controllers))
		for _, c := range cc.Controllers {
			ctrls = append(ctrls, map[string]any{"id": c.ID, "addr": fmt.Sprintf("%s:%d", c.Host, c.Port),
				"role": roleName(c.Role)})
		}
		queues := make([]map[string]any, 0, len(cc.Queues))
		for _, q := range cc.Queues {
			queues = append(queues, map[string]any{"name": q.Name, "open": q.Open,
				"active": q.Active, "priority": q.Priority})
		}
		return map[string]any{"name": cc.Name, "primary_id": cc.PrimaryID, "term": cc.Term,
			"controllers": ctrls, "queues": queues}, nil
	}))
	mux.HandleFunc("/v1/stats", s.get(func(ctx context.Context) (any, error) {
		st, err := s.c.Stats()
		if err != nil {
			return nil, err
		}
		return map[string]any{"library": st, "last_error": s.c.LastError(),
			"reconnects": s.reconnects.Load(), "rejoined": s.rejoined.Load(),
			"rejoin_failed": s.rejoinFailed.Load(),
			"answers": map[string]uint64{"2xx": s.ok2xx.Load(), "503_not_ready": s.notReady503.Load(),
				"other": s.other.Load()}}, nil
	}))
	mux.HandleFunc("/metrics", s.metrics)
	return mux
}

// metrics serves the library's per-context stats (xcecli_get_stats) and this server's own
// counters in the Prometheus text format (version 0.0.4).
func (s *server) metrics(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	st, err := s.c.Stats()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	var b strings.Builder
	metric := func(name, kind, help string, samples ...string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
		for _, s := range samples {
			fmt.Fprintf(&b, "%s%s\n", name, s)
		}
	}
	u := func(v uint64) string { return " " + strconv.FormatUint(v, 10) }
	metric("xce_client_requests_total", "counter", "Library calls made (xce_stats_t.requests).", u(st.Requests))
	metric("xce_client_retries_total", "counter", "Attempts re-sent by the library.", u(st.Retries))
	metric("xce_client_rotations_total", "counter", "Moves to another master.", u(st.Rotations))
	metric("xce_client_failovers_total", "counter", "Failovers the library went through.", u(st.Failovers))
	metric("xce_client_backoff_seconds_total", "counter", "Time spent backing off.",
		" "+strconv.FormatFloat(float64(st.BackoffMs)/1000, 'f', 3, 64))
	metric("xce_client_last_failover_seconds", "gauge", "Duration of the last failover.",
		" "+strconv.FormatFloat(float64(st.LastFailoverMs)/1000, 'f', 3, 64))
	metric("xce_client_current_master", "gauge",
		"Index of the master in use in the masters list (-1: not connected), labelled with its address.",
		fmt.Sprintf("{addr=%q} %d", st.CurrentMasterAddr, st.CurrentMaster))
	metric("xce_apiserver_answers_total", "counter", "HTTP answers by class.",
		`{class="2xx"}`+u(s.ok2xx.Load()), `{class="503_not_ready"}`+u(s.notReady503.Load()),
		`{class="other"}`+u(s.other.Load()))
	metric("xce_apiserver_reconnects_total", "counter", "Reconnect handler runs (one per new connection to a primary).", u(s.reconnects.Load()))
	metric("xce_apiserver_rejoin_failed_total", "counter", "Re-joins that failed in the reconnect handler.", u(s.rejoinFailed.Load()))
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if r.Method == http.MethodGet {
		io.WriteString(w, b.String())
	}
}

func roleName(r int) string {
	switch r {
	case xce.CtrlPrimary:
		return "PRIMARY"
	case xce.CtrlStandby:
		return "STANDBY"
	case xce.CtrlCandidate:
		return "CANDIDATE"
	case xce.CtrlInitializing:
		return "INITIALIZING"
	}
	return "UNKNOWN"
}

// callCtx bounds one request's library calls: the request's context (ended when the client
// goes away) with the per-call timeout as deadline.
func (s *server) callCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.callTimeout)
}

func (s *server) get(f func(ctx context.Context) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			s.fail(w, http.StatusMethodNotAllowed, "use GET")
			return
		}
		ctx, cancel := s.callCtx(r)
		defer cancel()
		out, err := f(ctx)
		if err != nil {
			s.libError(w, err)
			return
		}
		s.reply(w, http.StatusOK, out)
	}
}

// jobs: GET lists (?state=PEND,RUN&user=&queue=&limit=), POST submits.
func (s *server) jobs(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.callCtx(r)
	defer cancel()
	switch r.Method {
	case http.MethodGet:
		q := r.URL.Query()
		f := xce.JobFilter{User: q.Get("user"), Queue: q.Get("queue")}
		if st := q.Get("state"); st != "" {
			for _, name := range strings.Split(st, ",") {
				bit, ok := stateBit(name)
				if !ok {
					s.fail(w, http.StatusBadRequest, "unknown state "+strconv.Quote(name))
					return
				}
				f.StateMask |= bit
			}
		}
		if l := q.Get("limit"); l != "" {
			n, err := strconv.ParseUint(l, 10, 32)
			if err != nil {
				s.fail(w, http.StatusBadRequest, "bad limit")
				return
			}
			f.Limit = uint32(n)
		}
		jobs, err := s.c.JobList(ctx, f)
		if err != nil {
			s.libError(w, err)
			return
		}
		out := make([]JobJSON, 0, len(jobs))
		for _, j := range jobs {
			out = append(out, jobJSON(j))
		}
		s.reply(w, http.StatusOK, map[string]any{"jobs": out})
	case http.MethodPost:
		var in SubmitJSON
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			s.fail(w, http.StatusBadRequest, "bad job: "+err.Error())
			return
		}
		if in.Name == "" || in.Command == "" {
			s.fail(w, http.StatusBadRequest, "name and command are required")
			return
		}
		spec := xce.JobSpec{ID: in.ID, Name: in.Name, Command: in.Command, User: in.User,
			Queue: in.Queue, NCPUs: in.NCPUs, MemMB: in.MemMB}
		id, err := s.c.JobSubmit(ctx, spec)
		if errors.Is(err, xce.ErrDupJob) && in.ID != 0 {
			// Idempotent re-post: the same job already exists (e.g. an earlier try that
			// answered 503 had been applied).
			if j, ierr := s.c.JobInfo(ctx, in.ID); ierr == nil && sameJob(j, spec) {
				s.reply(w, http.StatusOK, map[string]any{"id": strconv.FormatUint(in.ID, 10), "existing": true})
				return
			}
		}
		if err != nil {
			s.libError(w, err)
			return
		}
		s.reply(w, http.StatusCreated, map[string]any{"id": strconv.FormatUint(id, 10)})
	default:
		s.fail(w, http.StatusMethodNotAllowed, "use GET or POST")
	}
}

func sameJob(j xce.Job, spec xce.JobSpec) bool {
	queue := spec.Queue
	if queue == "" {
		queue = "normal"
	}
	return j.Name == spec.Name && j.Command == spec.Command && j.User == spec.User && j.Queue == queue
}

func stateBit(name string) (uint32, bool) {
	for st := xce.JobPend; st <= xce.JobExit; st++ {
		if strings.EqualFold(name, st.String()) {
			return 1 << uint(st), true
		}
	}
	return 0, false
}

var actions = map[string]int{"kill": xce.JobKill, "suspend": xce.JobSuspend,
	"resume": xce.JobResume, "requeue": xce.JobRequeue}

// job: GET /v1/jobs/ID, POST /v1/jobs/ID/{kill,suspend,resume,requeue}.
func (s *server) job(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/v1/jobs/")
	parts := strings.Split(rest, "/")
	id, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil || id == 0 || len(parts) > 2 {
		s.fail(w, http.StatusNotFound, "no such path")
		return
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	if len(parts) == 1 {
		if r.Method != http.MethodGet {
			s.fail(w, http.StatusMethodNotAllowed, "use GET")
			return
		}
		j, err := s.c.JobInfo(ctx, id)
		if err != nil {
			s.libError(w, err)
			return
		}
		s.reply(w, http.StatusOK, jobJSON(j))
		return
	}
	action, ok := actions[parts[1]]
	if !ok {
		s.fail(w, http.StatusNotFound, "unknown action "+strconv.Quote(parts[1]))
		return
	}
	if r.Method != http.MethodPost {
		s.fail(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	if err := s.c.JobCtrl(ctx, id, action); err != nil {
		if errors.Is(err, xce.ErrInvalid) {
			s.fail(w, http.StatusConflict, parts[1]+": not possible in the job's state")
			return
		}
		s.libError(w, err)
		return
	}
	s.reply(w, http.StatusOK, map[string]any{"id": strconv.FormatUint(id, 10), "action": parts[1]})
}

// libError maps a library error to an HTTP answer: "cluster not ready" is 503 (try again),
// the rest says what went wrong.
func (s *server) libError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, xce.ErrNotReady):
		w.Header().Set("Retry-After", "1")
		s.fail(w, http.StatusServiceUnavailable, "cluster not ready")
	case errors.Is(err, xce.ErrClosed):
		s.fail(w, http.StatusServiceUnavailable, "shutting down")
	case errors.Is(err, context.DeadlineExceeded):
		s.fail(w, http.StatusGatewayTimeout, "timeout: "+err.Error())
	case errors.Is(err, context.Canceled):
		s.fail(w, http.StatusServiceUnavailable, "request cancelled")
	case errors.Is(err, xce.ErrNotFound):
		s.fail(w, http.StatusNotFound, "not found")
	case errors.Is(err, xce.ErrInvalid):
		s.fail(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, xce.ErrDupJob):
		s.fail(w, http.StatusConflict, "a different job with this id exists")
	default:
		s.fail(w, http.StatusBadGateway, err.Error())
	}
}

func (s *server) fail(w http.ResponseWriter, code int, msg string) {
	s.reply(w, code, map[string]string{"error": msg})
}

func (s *server) reply(w http.ResponseWriter, code int, v any) {
	switch {
	case code >= 200 && code < 300:
		s.ok2xx.Add(1)
	case code == http.StatusServiceUnavailable:
		if m, ok := v.(map[string]string); ok && m["error"] == "cluster not ready" {
			s.notReady503.Add(1)
		} else {
			s.other.Add(1)
		}
	default:
		s.other.Add(1)
	}
	if code >= 500 {
		log.Printf("answer %d: %v", code, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		log.Printf("write answer: %v", err)
	}
}
