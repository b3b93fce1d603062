package xce

/*
#include <stdlib.h>
#include <xce/xce.h>

// The filtered, flat job list (xcecli_joblist is the seeds' NULL-terminated form).
static int xce_go_joblist(xcecli_ctx_t h, const xce_job_filter_t *f, xce_job_t **out) {
	return xcecli_joblist_filter(h, f, out);
}
*/
import "C"

import (
	"context"
	"sort"
	"strings"
	"time"
	"unsafe"
)

// State is a job's state (Job.State): JobPend … JobExit; String gives the protocol's name.
type State int

// Job states.
const (
	JobPend State = C.XCE_JOB_PEND
	JobRun  State = C.XCE_JOB_RUN
	JobSusp State = C.XCE_JOB_SUSP
	JobDone State = C.XCE_JOB_DONE
	JobExit State = C.XCE_JOB_EXIT
)

// Jobctrl actions, queue and host actions, notify kinds, roles.
const (
	JobKill    = C.XCE_JOBCTRL_KILL
	JobSuspend = C.XCE_JOBCTRL_SUSPEND
	JobResume  = C.XCE_JOBCTRL_RESUME
	JobRequeue = C.XCE_JOBCTRL_REQUEUE

	QueueOpen       = C.XCE_QUEUE_OPEN
	QueueClose      = C.XCE_QUEUE_CLOSE
	QueueActivate   = C.XCE_QUEUE_ACTIVATE
	QueueInactivate = C.XCE_QUEUE_INACTIVATE

	HostOpen  = C.XCE_HOSTCTRL_OPEN
	HostClose = C.XCE_HOSTCTRL_CLOSE

	HostOK      = C.XCE_HOST_OK
	HostClosed  = C.XCE_HOST_CLOSED
	HostUnavail = C.XCE_HOST_UNAVAIL

	CtrlPrimary      = C.XCE_CTRL_PRIMARY
	CtrlStandby      = C.XCE_CTRL_STANDBY
	CtrlCandidate    = C.XCE_CTRL_CANDIDATE
	CtrlInitializing = C.XCE_CTRL_INITIALIZING

	NotifyJobStart  = C.XCE_NOTIFY_JOBSTART
	NotifyJobFinish = C.XCE_NOTIFY_JOBFINISH
	NotifyJobFail   = C.XCE_NOTIFY_JOBFAIL
	NotifyJobStop   = C.XCE_NOTIFY_JOBSTOP
	NotifyJobChkpt  = C.XCE_NOTIFY_JOBCHKPT

	RoleWorker    = C.XCE_ROLE_WORKER
	RoleScheduler = C.XCE_ROLE_SCHEDULER
	RoleAPIServer = C.XCE_ROLE_APISERVER
	RoleClient    = C.XCE_ROLE_CLIENT
)

// String is the protocol's name of the state ("PEND", "RUN", …; "UNKNOWN" for another value).
func (s State) String() string {
	switch s {
	case JobPend:
		return "PEND"
	case JobRun:
		return "RUN"
	case JobSusp:
		return "SUSP"
	case JobDone:
		return "DONE"
	case JobExit:
		return "EXIT"
	}
	return "UNKNOWN"
}

// JobStateName is state.String() (kept for callers of 0.1.0).
func JobStateName(state State) string { return state.String() }

// HostStateName is the protocol's name of a host state ("OK", "CLOSED", "UNAVAIL").
func HostStateName(state int) string {
	switch state {
	case HostOK:
		return "OK"
	case HostClosed:
		return "CLOSED"
	case HostUnavail:
		return "UNAVAIL"
	}
	return "UNKNOWN"
}

// cstrings frees the C strings of one call.
type cstrings []*C.char

func (cs *cstrings) add(s string) *C.char {
	p := C.CString(s)
	*cs = append(*cs, p)
	return p
}

func (cs cstrings) free() {
	for _, p := range cs {
		C.free(unsafe.Pointer(p))
	}
}

// ControllerInfo is what Hello learns about the controller that answered.
type ControllerInfo struct {
	ID              uint32
	Role            int
	Term            uint64
	PrimaryID       uint32
	PrimaryHost     string
	PrimaryPort     uint16
	Version         string
	ProtocolVersion uint32
}

// Hello identifies the client and reports who answered.
func (c *Client) Hello(ctx context.Context) (ControllerInfo, error) {
	var out ControllerInfo
	err := c.check(ctx, "hello", func(h C.xcecli_ctx_t) C.int {
		var info *C.xce_controller_info_t
		rc := C.xcecli_hello(h, &info)
		if rc < 0 {
			return rc
		}
		defer C.xce_free_controller_info(info)
		out = ControllerInfo{ID: uint32(info.id), Role: int(info.role), Term: uint64(info.term),
			PrimaryID: uint32(info.primary_id), PrimaryHost: C.GoString(info.primary_host),
			PrimaryPort: uint16(info.primary_port), Version: C.GoString(info.version),
			ProtocolVersion: uint32(info.protocol_version)}
		return rc
	})
	return out, err
}

// Job is xce_job_t, copied into Go memory. A time not reached yet (a pending job's StartTime)
// is the zero time.Time (IsZero).
type Job struct {
	ID         uint64
	Name       string
	User       string
	Queue      string
	Command    string
	NCPUs      uint32
	MemMB      uint64
	State      State
	PendReason string
	ExecHost   string
	SubmitTime time.Time
	StartTime  time.Time
	EndTime    time.Time
	ExitCode   int
	Usage      Usage
}

// Usage is the resource usage of a job (xce_usage_t).
type Usage struct {
	CPUMs uint64
	MemKB uint64
}

// msTime is the time of Unix milliseconds ms; 0 (not yet, never) is the zero time.Time.
func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func jobFromC(j *C.xce_job_t) Job {
	return Job{
		ID: uint64(j.jobid), Name: C.GoString(j.name), User: C.GoString(j.user),
		Queue: C.GoString(j.queue), Command: C.GoString(j.command), NCPUs: uint32(j.ncpus),
		MemMB: uint64(j.mem_mb), State: State(j.state), PendReason: C.GoString(j.pend_reason),
		ExecHost: C.GoString(j.exec_host), SubmitTime: msTime(int64(j.submit_time)),
		StartTime: msTime(int64(j.start_time)), EndTime: msTime(int64(j.end_time)),
		ExitCode: int(j.exit_code),
		Usage:    Usage{CPUMs: uint64(j.usage.cpu_ms), MemKB: uint64(j.usage.mem_kb)},
	}
}

// JobFilter selects jobs; zero values mean "any". StateMask has bits 1<<JobPend … 1<<JobExit.
type JobFilter struct {
	User      string
	Queue     string
	StateMask uint32
	Limit     uint32
}

// JobList lists the jobs matching f.
func (c *Client) JobList(ctx context.Context, f JobFilter) ([]Job, error) {
	var out []Job
	err := c.check(ctx, "joblist", func(h C.xcecli_ctx_t) C.int {
		var cs cstrings
		defer cs.free()
		cf := C.xce_job_filter_t{user: cs.add(f.User), queue: cs.add(f.Queue),
			state_mask: C.uint32_t(f.StateMask), limit: C.uint32_t(f.Limit)}
		var jobs *C.xce_job_t
		n := C.xce_go_joblist(h, &cf, &jobs)
		if n < 0 {
			return n
		}
		defer C.xce_free_jobs(jobs, C.size_t(n))
		out = make([]Job, 0, int(n))
		all := unsafe.Slice(jobs, int(n))
		for i := range all {
			out = append(out, jobFromC(&all[i]))
		}
		return n
	})
	return out, err
}

// JobInfo returns one job (ErrNotFound for an unknown id).
func (c *Client) JobInfo(ctx context.Context, id uint64) (Job, error) {
	var out Job
	err := c.check(ctx, "jobinfo", func(h C.xcecli_ctx_t) C.int {
		var j *C.xce_job_t
		rc := C.xcecli_jobinfo(h, C.uint64_t(id), &j)
		if rc < 0 {
			return rc
		}
		defer C.xce_free_job(j)
		out = jobFromC(j)
		return rc
	})
	return out, err
}

// Resource is a resource definition (xce_resource_t); Kind is "numeric", "string" or "boolean".
type Resource struct {
	Name        string
	Kind        string
	Description string
}

// ResList lists the resource definitions.
func (c *Client) ResList(ctx context.Context) ([]Resource, error) {
	var out []Resource
	err := c.check(ctx, "reslist", func(h C.xcecli_ctx_t) C.int {
		var res *C.xce_resource_t
		n := C.xcecli_reslist(h, &res)
		if n < 0 {
			return n
		}
		defer C.xce_free_resources(res, C.size_t(n))
		out = make([]Resource, 0, int(n))
		for _, r := range unsafe.Slice(res, int(n)) {
			out = append(out, Resource{Name: C.GoString(r.name), Kind: C.GoString(r.kind),
				Description: C.GoString(r.description)})
		}
		return n
	})
	return out, err
}

// Host is a worker host (xce_host_t). LastHeartbeat is the zero time.Time before the first.
type Host struct {
	Name          string
	State         int
	NCPUs         uint32
	MemMB         uint64
	NJobs         uint32
	Attrs         map[string]string
	LastHeartbeat time.Time
}

// WorkerList lists the worker hosts.
func (c *Client) WorkerList(ctx context.Context) ([]Host, error) {
	var out []Host
	err := c.check(ctx, "workerlist", func(h C.xcecli_ctx_t) C.int {
		var hosts *C.xce_host_t
		n := C.xcecli_workerlist(h, &hosts)
		if n < 0 {
			return n
		}
		defer C.xce_free_hosts(hosts, C.size_t(n))
		out = make([]Host, 0, int(n))
		for _, ho := range unsafe.Slice(hosts, int(n)) {
			attrs := map[string]string{}
			for _, kv := range unsafe.Slice(ho.attrs, int(ho.nattrs)) {
				attrs[C.GoString(kv.key)] = C.GoString(kv.value)
			}
			out = append(out, Host{Name: C.GoString(ho.name), State: int(ho.state),
				NCPUs: uint32(ho.ncpus), MemMB: uint64(ho.mem_mb), NJobs: uint32(ho.njobs),
				Attrs: attrs, LastHeartbeat: msTime(int64(ho.last_heartbeat))})
		}
		return n
	})
	return out, err
}

// Controller is one controller of the cluster (xce_controller_entry_t).
type Controller struct {
	ID   uint32
	Host string
	Port uint16
	Role int
}

// Queue is a queue of the cluster (xce_queue_t).
type Queue struct {
	Name     string
	Open     bool
	Active   bool
	Priority int
}

// ClusterConf is xce_cluster_conf_t.
type ClusterConf struct {
	Name        string
	PrimaryID   uint32
	Term        uint64
	Controllers []Controller
	Queues      []Queue
}

// ClusterConf reports the cluster's controllers, primary, term and queues.
func (c *Client) ClusterConf(ctx context.Context) (ClusterConf, error) {
	var out ClusterConf
	err := c.check(ctx, "clusterconf", func(h C.xcecli_ctx_t) C.int {
		var cc *C.xce_cluster_conf_t
		rc := C.xcecli_clusterconf(h, &cc)
		if rc < 0 {
			return rc
		}
		defer C.xce_free_cluster_conf(cc)
		out = ClusterConf{Name: C.GoString(cc.cluster_name), PrimaryID: uint32(cc.primary_id),
			Term: uint64(cc.term)}
		for _, e := range unsafe.Slice(cc.controllers, int(cc.ncontrollers)) {
			out.Controllers = append(out.Controllers, Controller{ID: uint32(e.id),
				Host: C.GoString(e.host), Port: uint16(e.port), Role: int(e.role)})
		}
		for _, q := range unsafe.Slice(cc.queues, int(cc.nqueues)) {
			out.Queues = append(out.Queues, Queue{Name: C.GoString(q.name), Open: q.open != 0,
				Active: q.active != 0, Priority: int(q.priority)})
		}
		return rc
	})
	return out, err
}

// ResVal is one resource value name=value of a host (xce_resval_t).
type ResVal struct {
	Name  string
	Value string
}

// ResVal returns the resource values of host.
func (c *Client) ResVal(ctx context.Context, host string) ([]ResVal, error) {
	var out []ResVal
	err := c.check(ctx, "resval", func(h C.xcecli_ctx_t) C.int {
		ch := C.CString(host)
		defer C.free(unsafe.Pointer(ch))
		var rv *C.xce_resval_t
		n := C.xcecli_resval(h, ch, &rv)
		if n < 0 {
			return n
		}
		defer C.xce_free_resvals(rv, C.size_t(n))
		out = make([]ResVal, 0, int(n))
		for _, r := range unsafe.Slice(rv, int(n)) {
			out = append(out, ResVal{Name: C.GoString(r.name), Value: C.GoString(r.value)})
		}
		return n
	})
	return out, err
}

// JoinSpec registers a session (xce_join_t): Role is RoleWorker, RoleScheduler, RoleAPIServer
// or RoleClient; Host is required.
type JoinSpec struct {
	Role  int
	Host  string
	NCPUs uint32
	MemMB uint64
	Attrs map[string]string
}

// Join binds a session to this client's connection and returns its id. Sessions do not
// survive a failover: re-join from the reconnect handler (SetReconnectHandler).
func (c *Client) Join(ctx context.Context, j JoinSpec) (uint64, error) {
	var sid C.uint64_t
	err := c.check(ctx, "join", func(h C.xcecli_ctx_t) C.int {
		var cs cstrings
		defer cs.free()
		keys := make([]string, 0, len(j.Attrs))
		for k := range j.Attrs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		cj := C.xce_join_t{role: C.int32_t(j.Role), host: cs.add(j.Host),
			ncpus: C.uint32_t(j.NCPUs), mem_mb: C.uint64_t(j.MemMB)}
		if len(keys) > 0 {
			size := C.size_t(unsafe.Sizeof(C.xce_kv_t{})) * C.size_t(len(keys))
			kvp := (*C.xce_kv_t)(C.malloc(size))
			defer C.free(unsafe.Pointer(kvp))
			kvs := unsafe.Slice(kvp, len(keys))
			for i, k := range keys {
				kvs[i] = C.xce_kv_t{key: cs.add(k), value: cs.add(j.Attrs[k])}
			}
			cj.attrs = kvp
			cj.nattrs = C.size_t(len(keys))
		}
		return C.xcecli_join(h, &cj, &sid)
	})
	return uint64(sid), err
}

// JobSpec is what JobSubmit sends; ID 0 lets the library generate one.
type JobSpec struct {
	ID      uint64
	Name    string
	User    string
	Queue   string
	Command string
	NCPUs   uint32
	MemMB   uint64
}

// JobSubmit submits a job and returns its id (exactly once across failovers, F16). A
// genuine duplicate id is ErrDupJob.
func (c *Client) JobSubmit(ctx context.Context, spec JobSpec) (uint64, error) {
	var id C.uint64_t
	err := c.check(ctx, "jobsubmit", func(h C.xcecli_ctx_t) C.int {
		var cs cstrings
		defer cs.free()
		cspec := C.xce_job_spec_t{
			jobid: C.uint64_t(spec.ID), name: cs.add(spec.Name), user: cs.add(spec.User),
			queue: cs.add(spec.Queue), command: cs.add(spec.Command),
			ncpus: C.uint32_t(spec.NCPUs), mem_mb: C.uint64_t(spec.MemMB),
		}
		return C.xcecli_jobsubmit(h, &cspec, &id)
	})
	return uint64(id), err
}

// JobDispatch starts job id on host (needs a scheduler session).
func (c *Client) JobDispatch(ctx context.Context, id uint64, host string) error {
	return c.check(ctx, "jobdispatch", func(h C.xcecli_ctx_t) C.int {
		ch := C.CString(host)
		defer C.free(unsafe.Pointer(ch))
		return C.xcecli_jobdispatch(h, C.uint64_t(id), ch)
	})
}

// JobCtrl applies JobKill, JobSuspend, JobResume or JobRequeue to a job.
func (c *Client) JobCtrl(ctx context.Context, id uint64, action int) error {
	return c.check(ctx, "jobctrl", func(h C.xcecli_ctx_t) C.int {
		return C.xcecli_jobctrl(h, C.uint64_t(id), C.int(action))
	})
}

// QueueCtrl applies QueueOpen, QueueClose, QueueActivate or QueueInactivate to a queue.
func (c *Client) QueueCtrl(ctx context.Context, queue string, action int) error {
	return c.check(ctx, "queuectrl", func(h C.xcecli_ctx_t) C.int {
		cq := C.CString(queue)
		defer C.free(unsafe.Pointer(cq))
		return C.xcecli_queuectrl(h, cq, C.int(action))
	})
}

// HostCtrl applies HostOpen or HostClose to a worker host.
func (c *Client) HostCtrl(ctx context.Context, host string, action int) error {
	return c.check(ctx, "hostctrl", func(h C.xcecli_ctx_t) C.int {
		ch := C.CString(host)
		defer C.free(unsafe.Pointer(ch))
		return C.xcecli_hostctrl(h, ch, C.int(action))
	})
}

// UpdateResvals stores resource values of host (needs a worker session).
func (c *Client) UpdateResvals(ctx context.Context, host string, vals []ResVal) error {
	return c.check(ctx, "update_resvals", func(h C.xcecli_ctx_t) C.int {
		var cs cstrings
		defer cs.free()
		var p *C.xce_resval_t
		if len(vals) > 0 {
			p = (*C.xce_resval_t)(C.malloc(C.size_t(unsafe.Sizeof(C.xce_resval_t{})) * C.size_t(len(vals))))
			defer C.free(unsafe.Pointer(p))
			arr := unsafe.Slice(p, len(vals))
			for i, v := range vals {
				arr[i] = C.xce_resval_t{name: cs.add(v.Name), value: cs.add(v.Value)}
			}
		}
		return C.xcecli_update_resvals(h, cs.add(host), p, C.size_t(len(vals)))
	})
}

// UpdateJUsage stores the resource usage of job id (needs a worker session).
func (c *Client) UpdateJUsage(ctx context.Context, id uint64, u Usage) error {
	return c.check(ctx, "update_jusage", func(h C.xcecli_ctx_t) C.int {
		cu := C.xce_usage_t{cpu_ms: C.uint64_t(u.CPUMs), mem_kb: C.uint64_t(u.MemKB)}
		return C.xcecli_update_jusage(h, C.uint64_t(id), &cu)
	})
}

// RunTask runs command on host and returns the task id.
func (c *Client) RunTask(ctx context.Context, host, command string) (uint64, error) {
	var id C.uint64_t
	err := c.check(ctx, "runtask", func(h C.xcecli_ctx_t) C.int {
		var cs cstrings
		defer cs.free()
		return C.xcecli_runtask(h, cs.add(host), cs.add(command), &id)
	})
	return uint64(id), err
}

// SetPendReason sets the pending reason of job id (needs a scheduler session).
func (c *Client) SetPendReason(ctx context.Context, id uint64, reason string) error {
	return c.check(ctx, "set_pend_reason", func(h C.xcecli_ctx_t) C.int {
		cr := C.CString(reason)
		defer C.free(unsafe.Pointer(cr))
		return C.xcecli_set_pend_reason(h, C.uint64_t(id), cr)
	})
}

// ClearReason clears the pending reason of job id (needs a scheduler session).
func (c *Client) ClearReason(ctx context.Context, id uint64) error {
	return c.check(ctx, "clear_reason", func(h C.xcecli_ctx_t) C.int {
		return C.xcecli_clear_reason(h, C.uint64_t(id))
	})
}

// Notify tells the controller about job id (kind NotifyJobStart … NotifyJobChkpt; exitCode
// for finish and fail). Fire-and-forget (F12): nil means sent, not applied — a notify sent
// just before a failover is lost, so check the job's state (JobInfo) and re-send.
func (c *Client) Notify(ctx context.Context, kind int, id uint64, exitCode int) error {
	return c.check(ctx, "notify", func(h C.xcecli_ctx_t) C.int {
		return C.xcecli_notify(h, C.int(kind), C.uint64_t(id), C.int(exitCode))
	})
}

// NotifyJobStart is Notify(ctx, NotifyJobStart, id, 0).
func (c *Client) NotifyJobStart(ctx context.Context, id uint64) error {
	return c.Notify(ctx, NotifyJobStart, id, 0)
}

// NotifyJobFinish is Notify(ctx, NotifyJobFinish, id, exitCode).
func (c *Client) NotifyJobFinish(ctx context.Context, id uint64, exitCode int) error {
	return c.Notify(ctx, NotifyJobFinish, id, exitCode)
}

// NotifyJobFail is Notify(ctx, NotifyJobFail, id, exitCode).
func (c *Client) NotifyJobFail(ctx context.Context, id uint64, exitCode int) error {
	return c.Notify(ctx, NotifyJobFail, id, exitCode)
}

// NotifyJobStop is Notify(ctx, NotifyJobStop, id, 0).
func (c *Client) NotifyJobStop(ctx context.Context, id uint64) error {
	return c.Notify(ctx, NotifyJobStop, id, 0)
}

// NotifyJobChkpt is Notify(ctx, NotifyJobChkpt, id, 0).
func (c *Client) NotifyJobChkpt(ctx context.Context, id uint64) error {
	return c.Notify(ctx, NotifyJobChkpt, id, 0)
}

// Heartbeat reports worker host alive (needs a worker session). Fire-and-forget (F12); it
// replaces a heartbeat of the same host still waiting in the outbox.
func (c *Client) Heartbeat(ctx context.Context, host string) error {
	return c.check(ctx, "heartbeat", func(h C.xcecli_ctx_t) C.int {
		ch := C.CString(host)
		defer C.free(unsafe.Pointer(ch))
		return C.xcecli_heartbeat(h, ch)
	})
}

// Nop sends a no-op (keeps the connection warm). Fire-and-forget (F12).
func (c *Client) Nop(ctx context.Context) error {
	return c.check(ctx, "nop", func(h C.xcecli_ctx_t) C.int { return C.xcecli_nop(h) })
}

// Wakeup makes the calls blocked on this client (whichever goroutines made them) return
// EINTR; with none blocked nothing happens: no wake is kept for a later call (F27). To end one
// goroutine's call, cancel its context instead; to end every call from now on, RequestStop.
func (c *Client) Wakeup() error {
	return c.local("wakeup", func(h C.xcecli_ctx_t) C.int { return C.xcecli_wakeup(h) })
}

// TryWakeup wakes a call blocked on this client only if there is one; true when it did.
func (c *Client) TryWakeup() (bool, error) {
	var woke C.int
	err := c.local("try_wakeup", func(h C.xcecli_ctx_t) C.int {
		woke = C.xcecli_try_wakeup(h)
		return woke
	})
	return woke == 1, err
}

// RequestStop sets the client's "stop requested" state (F27): calls in progress end, and every
// later call fails at once, with CodeStopRequested, until ClearStopRequest.
func (c *Client) RequestStop() error {
	return c.local("request_stop", func(h C.xcecli_ctx_t) C.int { return C.xcecli_request_stop(h) })
}

// ClearStopRequest clears the "stop requested" state: calls run again.
func (c *Client) ClearStopRequest() error {
	return c.local("clear_stop_request", func(h C.xcecli_ctx_t) C.int {
		if rc := C.xcecli_clear_stop_request(h); rc < 0 {
			return rc
		}
		return 0
	})
}

// Stats is xce_stats_t (F17): counters since Start.
type Stats struct {
	Requests, Retries, Rotations, Failovers, BackoffMs, LastFailoverMs uint64
	// CurrentMaster is the index of the current master in Masters() (the configured ones
	// first, in Config.Masters order, then those learned from the primary, F29), -1 when not
	// connected; CurrentMasterAddr its "host:port" ("" then).
	CurrentMaster     int
	CurrentMasterAddr string
}

// Stats reads the client's counters; it does not wait for a call in progress.
func (c *Client) Stats() (Stats, error) {
	var out Stats
	err := c.local("stats", func(h C.xcecli_ctx_t) C.int {
		var st C.xce_stats_t
		rc := C.xcecli_get_stats(h, &st)
		if rc < 0 {
			return rc
		}
		out = Stats{Requests: uint64(st.requests), Retries: uint64(st.retries),
			Rotations: uint64(st.rotations), Failovers: uint64(st.failovers),
			BackoffMs: uint64(st.backoff_ms), LastFailoverMs: uint64(st.last_failover_ms),
			CurrentMaster: int(st.current_master)}
		if st.current_master >= 0 {
			out.CurrentMasterAddr = C.GoString(&st.current_master_host[0]) + ":" +
				itoa(int(st.current_master_port))
		}
		return rc
	})
	return out, err
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// LastError is xce_last_error_t (F19): what the last failed call on the client did.
type LastError struct {
	Status       int // the negative status it returned
	Attempts     uint32
	ElapsedMs    uint64
	MaybeApplied bool  // a write that was sent without a reply seen
	MasterStatus []int // last status from each configured master (0: not tried)
}

// LastErrorInfo describes the last failed call; ok is false when no call has failed.
func (c *Client) LastErrorInfo() (le LastError, ok bool) {
	_ = c.local("last_error", func(h C.xcecli_ctx_t) C.int {
		var out C.xce_last_error_t
		if C.xcecli_last_error(h, &out) < 0 {
			return 0
		}
		ok = true
		le = LastError{Status: int(out.status), Attempts: uint32(out.attempts),
			ElapsedMs: uint64(out.elapsed_ms), MaybeApplied: out.maybe_applied != 0}
		for _, s := range out.master_status[:out.nmasters] {
			le.MasterStatus = append(le.MasterStatus, int(s))
		}
		return 0
	})
	return le, ok
}

// LastError describes the last failed call in one line (F19); "" when none failed.
func (c *Client) LastError() string {
	var text string
	_ = c.local("last_error_text", func(h C.xcecli_ctx_t) C.int {
		n := C.xcecli_last_error_text(h, nil, 0)
		if n < 0 {
			return 0
		}
		buf := make([]byte, int(n)+1)
		C.xcecli_last_error_text(h, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
		text = string(buf[:n])
		return 0
	})
	return text
}

// Masters returns the controllers the client rotates over (F29): the configured ones in
// order, then those learned from the primary, each as "host:port". It never waits for a call
// in progress.
func (c *Client) Masters() ([]string, error) {
	var list []string
	err := c.local("get_masters", func(h C.xcecli_ctx_t) C.int {
		n := C.xcecli_get_masters(h, nil, 0)
		for n >= 0 {
			buf := make([]byte, int(n)+1)
			m := C.xcecli_get_masters(h, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
			if m < 0 || m <= n {
				if m >= 0 {
					list = strings.Split(string(buf[:m]), ",")
				}
				return m
			}
			n = m // the list grew in between: measure again
		}
		return n
	})
	return list, err
}
