// Package xce is the Go binding of libxce (include/xce/xce.h) through cgo, as the apiserver
// uses it: one *Client shared by many goroutines, errors comparable with errors.Is.
//
// It links against the library cargo built in target/release (libxce.so.0 must be there:
// scripts/ctest.sh creates the soname link). The library starts no threads and installs no
// signal handlers, so it is safe under the Go runtime; a call blocks its goroutine's OS
// thread for at most the context's retry budget.
package xce

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -L${SRCDIR}/../../target/release -lxce -Wl,-rpath,${SRCDIR}/../../target/release
#include <stdlib.h>
#include <xce/xce.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Status codes of protocol.md (the header's E_XCE_* values).
const (
	CodeRedirect = C.E_XCE_REDIRECT
	CodeNoMaster = C.E_XCE_NOMASTER
	CodeNotReady = C.E_XCE_NOT_READY
	CodeStandby  = C.E_XCE_STANDBY
	CodeDupJob   = C.E_XCE_DUP_JOB
	CodeProto    = C.E_XCE_PROTO
	CodeAuth     = C.E_XCE_AUTH
	CodeTLS      = C.E_XCE_TLS
	CodeInternal = C.E_XCE_INTERNAL
)

// Error is a failed call: the op and the library's status (a positive errno or E_XCE_* code).
type Error struct {
	Op   string
	Code int
}

func (e *Error) Error() string {
	text := Strerror(e.Code)
	if e.Op == "" {
		return "xce: " + text
	}
	return "xce: " + e.Op + ": " + text
}

// Is makes errors.Is(err, xce.ErrNotReady) (and the other sentinels) match any *Error with
// the same code, whatever the op.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Unwrap exposes errno values as syscall.Errno, so errors.Is(err, syscall.ECONNREFUSED)
// works too.
func (e *Error) Unwrap() error {
	if e.Code > 0 && e.Code < 2000 {
		return syscall.Errno(e.Code)
	}
	return nil
}

// Sentinels for errors.Is.
var (
	ErrRedirect = &Error{Code: CodeRedirect}
	ErrNoMaster = &Error{Code: CodeNoMaster}
	// ErrNotReady: no primary within the retry budget ("cluster not ready").
	ErrNotReady = &Error{Code: CodeNotReady}
	ErrStandby  = &Error{Code: CodeStandby}
	ErrDupJob   = &Error{Code: CodeDupJob}
	ErrProto    = &Error{Code: CodeProto}
	ErrAuth     = &Error{Code: CodeAuth}
	ErrTLS      = &Error{Code: CodeTLS}
	ErrInternal = &Error{Code: CodeInternal}
	// ErrInvalid: a bad argument (EINVAL).
	ErrInvalid = &Error{Code: int(syscall.EINVAL)}
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("xce: client closed")
)

// check turns a C status into nil or an *Error.
func check(op string, rc C.int) error {
	if rc >= 0 {
		return nil
	}
	return &Error{Op: op, Code: int(-rc)}
}

// Strerror is xce_strerror: the text of any status or code, either sign.
func Strerror(code int) string {
	return C.GoString(C.xce_strerror(C.int(code)))
}

// Version is the library's version string.
func Version() string {
	return C.GoString(C.xce_version())
}

// NewJobID returns a job id unique across clients and restarts, for JobSpec.ID.
func NewJobID() uint64 {
	var id C.uint64_t
	C.xce_new_jobid(&id)
	return uint64(id)
}

// Config is xce_client_config_t: Masters in the "host:port,host:port" syntax; the TLS files
// are optional (a CA enables TLS).
type Config struct {
	Masters    string
	ClientName string
	TLSCA      string
	TLSCert    string
	TLSKey     string
}

// setFixed copies s into a C char array field, NUL-terminated.
func setFixed(dst []C.char, s string) error {
	if len(s) >= len(dst) {
		return ErrInvalid
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return ErrInvalid
		}
		dst[i] = C.char(s[i])
	}
	dst[len(s)] = 0
	return nil
}

// Client is one context (xcecli_ctx_t), safe for concurrent use by many goroutines: the
// library serialises calls on it (F11).
type Client struct {
	// mu: calls hold it shared, Close exclusively, so the context is never freed under a call.
	mu     sync.RWMutex
	ctx    C.xcecli_ctx_t
	closed int32
}

// Start connects to the first reachable master (F2).
func Start(cfg Config) (*Client, error) {
	conf := (*C.xce_client_config_t)(C.calloc(1, C.size_t(unsafe.Sizeof(C.xce_client_config_t{}))))
	defer C.free(unsafe.Pointer(conf))
	C.xce_client_config_init(conf)
	list := C.CString(cfg.Masters)
	defer C.free(unsafe.Pointer(list))
	if err := check("start", C.xce_client_config_parse_masters(conf, list)); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		dst []C.char
		s   string
	}{
		{conf.client_name[:], cfg.ClientName},
		{conf.tls_ca_file[:], cfg.TLSCA},
		{conf.tls_cert_file[:], cfg.TLSCert},
		{conf.tls_key_file[:], cfg.TLSKey},
	} {
		if err := setFixed(f.dst, f.s); err != nil {
			return nil, &Error{Op: "start", Code: int(syscall.EINVAL)}
		}
	}
	var ctx C.xcecli_ctx_t
	if err := check("start", C.xcecli_start(conf, &ctx)); err != nil {
		return nil, err
	}
	return &Client{ctx: ctx}, nil
}

// enter takes the shared lock for a call; false when the client is closed.
func (c *Client) enter() bool {
	c.mu.RLock()
	if c.ctx == nil {
		c.mu.RUnlock()
		return false
	}
	return true
}

// Close wakes any blocked call (it returns EINTR), waits for calls to leave, and frees the
// context. Idempotent.
func (c *Client) Close() {
	if !atomic.CompareAndSwapInt32(&c.closed, 0, 1) {
		return
	}
	c.mu.RLock()
	if c.ctx != nil {
		C.xcecli_wakeup(c.ctx)
	}
	c.mu.RUnlock()
	c.mu.Lock()
	C.xcecli_stop(c.ctx)
	c.ctx = nil
	c.mu.Unlock()
}

// Wakeup makes a call blocked on this client return EINTR (F13).
func (c *Client) Wakeup() {
	if c.enter() {
		C.xcecli_wakeup(c.ctx)
		c.mu.RUnlock()
	}
}

// RetryConfig is xce_retry_config_t.
type RetryConfig struct {
	MaxRetries        uint32
	InitialRetryMs    uint32
	MaxRetryMs        uint32
	BackoffMultiplier float64
}

// DefaultRetry is XCE_RETRY_DEFAULTS.
var DefaultRetry = RetryConfig{
	MaxRetries:        C.XCE_RETRY_DEFAULT_MAX_RETRIES,
	InitialRetryMs:    C.XCE_RETRY_DEFAULT_INITIAL_MS,
	MaxRetryMs:        C.XCE_RETRY_DEFAULT_MAX_MS,
	BackoffMultiplier: C.XCE_RETRY_DEFAULT_MULTIPLIER,
}

// SetRetry sets the retry policy; nil restores the defaults.
func (c *Client) SetRetry(r *RetryConfig) error {
	if !c.enter() {
		return ErrClosed
	}
	defer c.mu.RUnlock()
	if r == nil {
		return check("set_retry_config", C.xcecli_set_retry_config(c.ctx, nil))
	}
	cr := C.xce_retry_config_t{
		max_retries:        C.uint32_t(r.MaxRetries),
		initial_retry_ms:   C.uint32_t(r.InitialRetryMs),
		max_retry_ms:       C.uint32_t(r.MaxRetryMs),
		backoff_multiplier: C.double(r.BackoffMultiplier),
	}
	return check("set_retry_config", C.xcecli_set_retry_config(c.ctx, &cr))
}

// Option is an XCE_OPT_* knob.
type Option int

const (
	OptConnectTimeoutMs Option = C.XCE_OPT_CONNECT_TIMEOUT_MS
	OptReplyTimeoutMs   Option = C.XCE_OPT_REPLY_TIMEOUT_MS
	OptDeadlineMs       Option = C.XCE_OPT_DEADLINE_MS
	OptRedirectPolicy   Option = C.XCE_OPT_REDIRECT_POLICY
	OptWaitPrimary      Option = C.XCE_OPT_WAIT_PRIMARY
)

// SetOption sets one knob (xcecli_set_option).
func (c *Client) SetOption(opt Option, value int64) error {
	if !c.enter() {
		return ErrClosed
	}
	defer c.mu.RUnlock()
	return check("set_option", C.xcecli_set_option(c.ctx, C.int(opt), C.int64_t(value)))
}

// Job states (Job.State) and jobctrl actions.
const (
	JobPend = C.XCE_JOB_PEND
	JobRun  = C.XCE_JOB_RUN
	JobSusp = C.XCE_JOB_SUSP
	JobDone = C.XCE_JOB_DONE
	JobExit = C.XCE_JOB_EXIT

	JobKill    = C.XCE_JOBCTRL_KILL
	JobSuspend = C.XCE_JOBCTRL_SUSPEND
	JobResume  = C.XCE_JOBCTRL_RESUME
	JobRequeue = C.XCE_JOBCTRL_REQUEUE
)

// Job is xce_job_t, copied into Go memory.
type Job struct {
	ID         uint64
	Name       string
	User       string
	Queue      string
	Command    string
	NCPUs      uint32
	MemMB      uint64
	State      int
	PendReason string
	ExecHost   string
	SubmitTime int64
	StartTime  int64
	EndTime    int64
	ExitCode   int
	CPUMs      uint64
	MemKB      uint64
}

func jobFromC(j *C.xce_job_t) Job {
	return Job{
		ID: uint64(j.jobid), Name: C.GoString(j.name), User: C.GoString(j.user),
		Queue: C.GoString(j.queue), Command: C.GoString(j.command), NCPUs: uint32(j.ncpus),
		MemMB: uint64(j.mem_mb), State: int(j.state), PendReason: C.GoString(j.pend_reason),
		ExecHost: C.GoString(j.exec_host), SubmitTime: int64(j.submit_time),
		StartTime: int64(j.start_time), EndTime: int64(j.end_time), ExitCode: int(j.exit_code),
		CPUMs: uint64(j.usage.cpu_ms), MemKB: uint64(j.usage.mem_kb),
	}
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

// JobSubmit submits a job and returns its id (exactly once across failovers, F16).
func (c *Client) JobSubmit(spec JobSpec) (uint64, error) {
	if !c.enter() {
		return 0, ErrClosed
	}
	defer c.mu.RUnlock()
	var cs cstrings
	defer cs.free()
	cspec := C.xce_job_spec_t{
		jobid: C.uint64_t(spec.ID), name: cs.add(spec.Name), user: cs.add(spec.User),
		queue: cs.add(spec.Queue), command: cs.add(spec.Command),
		ncpus: C.uint32_t(spec.NCPUs), mem_mb: C.uint64_t(spec.MemMB),
	}
	var id C.uint64_t
	if err := check("jobsubmit", C.xcecli_jobsubmit(c.ctx, &cspec, &id)); err != nil {
		return 0, err
	}
	return uint64(id), nil
}

// JobFilter selects jobs; zero values mean "any".
type JobFilter struct {
	User      string
	Queue     string
	StateMask uint32
	Limit     uint32
}

// JobList lists the jobs matching f.
func (c *Client) JobList(f JobFilter) ([]Job, error) {
	if !c.enter() {
		return nil, ErrClosed
	}
	defer c.mu.RUnlock()
	var cs cstrings
	defer cs.free()
	cf := C.xce_job_filter_t{user: cs.add(f.User), queue: cs.add(f.Queue),
		state_mask: C.uint32_t(f.StateMask), limit: C.uint32_t(f.Limit)}
	var jobs *C.xce_job_t
	n := C.xcecli_joblist_filter(c.ctx, &cf, &jobs)
	if err := check("joblist", n); err != nil {
		return nil, err
	}
	defer C.xce_free_jobs(jobs, C.size_t(n))
	out := make([]Job, 0, int(n))
	for _, j := range unsafe.Slice(jobs, int(n)) {
		out = append(out, jobFromC(&j))
	}
	return out, nil
}

// JobInfo returns one job (ENOENT for an unknown id).
func (c *Client) JobInfo(id uint64) (Job, error) {
	if !c.enter() {
		return Job{}, ErrClosed
	}
	defer c.mu.RUnlock()
	var j *C.xce_job_t
	if err := check("jobinfo", C.xcecli_jobinfo(c.ctx, C.uint64_t(id), &j)); err != nil {
		return Job{}, err
	}
	defer C.xce_free_job(j)
	return jobFromC(j), nil
}

// JobCtrl applies JobKill / JobSuspend / JobResume / JobRequeue to a job.
func (c *Client) JobCtrl(id uint64, action int) error {
	if !c.enter() {
		return ErrClosed
	}
	defer c.mu.RUnlock()
	return check("jobctrl", C.xcecli_jobctrl(c.ctx, C.uint64_t(id), C.int(action)))
}

// ControllerInfo is what Hello learns.
type ControllerInfo struct {
	ID          uint32
	Role        int
	Term        uint64
	PrimaryID   uint32
	PrimaryHost string
	PrimaryPort uint16
	Version     string
}

// Hello identifies the client and reports who answered.
func (c *Client) Hello() (ControllerInfo, error) {
	if !c.enter() {
		return ControllerInfo{}, ErrClosed
	}
	defer c.mu.RUnlock()
	var info *C.xce_controller_info_t
	if err := check("hello", C.xcecli_hello(c.ctx, &info)); err != nil {
		return ControllerInfo{}, err
	}
	defer C.xce_free_controller_info(info)
	return ControllerInfo{ID: uint32(info.id), Role: int(info.role), Term: uint64(info.term),
		PrimaryID: uint32(info.primary_id), PrimaryHost: C.GoString(info.primary_host),
		PrimaryPort: uint16(info.primary_port), Version: C.GoString(info.version)}, nil
}

// Host is xce_host_t.
type Host struct {
	Name  string
	State int
	NCPUs uint32
	MemMB uint64
	NJobs uint32
	Attrs map[string]string
}

// WorkerList lists the worker hosts.
func (c *Client) WorkerList() ([]Host, error) {
	if !c.enter() {
		return nil, ErrClosed
	}
	defer c.mu.RUnlock()
	var hosts *C.xce_host_t
	n := C.xcecli_workerlist(c.ctx, &hosts)
	if err := check("workerlist", n); err != nil {
		return nil, err
	}
	defer C.xce_free_hosts(hosts, C.size_t(n))
	out := make([]Host, 0, int(n))
	for _, h := range unsafe.Slice(hosts, int(n)) {
		attrs := map[string]string{}
		for _, kv := range unsafe.Slice(h.attrs, int(h.nattrs)) {
			attrs[C.GoString(kv.key)] = C.GoString(kv.value)
		}
		out = append(out, Host{Name: C.GoString(h.name), State: int(h.state),
			NCPUs: uint32(h.ncpus), MemMB: uint64(h.mem_mb), NJobs: uint32(h.njobs), Attrs: attrs})
	}
	return out, nil
}

// ClusterConf is xce_cluster_conf_t (controllers and queues by name).
type ClusterConf struct {
	Name        string
	PrimaryID   uint32
	Term        uint64
	Controllers []string // "id host:port"
	Queues      []string
}

// ClusterConf reports the cluster's controllers, primary and queues.
func (c *Client) ClusterConf() (ClusterConf, error) {
	if !c.enter() {
		return ClusterConf{}, ErrClosed
	}
	defer c.mu.RUnlock()
	var cc *C.xce_cluster_conf_t
	if err := check("clusterconf", C.xcecli_clusterconf(c.ctx, &cc)); err != nil {
		return ClusterConf{}, err
	}
	defer C.xce_free_cluster_conf(cc)
	out := ClusterConf{Name: C.GoString(cc.cluster_name), PrimaryID: uint32(cc.primary_id),
		Term: uint64(cc.term)}
	for _, e := range unsafe.Slice(cc.controllers, int(cc.ncontrollers)) {
		out.Controllers = append(out.Controllers,
			fmt.Sprintf("%d %s:%d", uint32(e.id), C.GoString(e.host), uint16(e.port)))
	}
	for _, q := range unsafe.Slice(cc.queues, int(cc.nqueues)) {
		out.Queues = append(out.Queues, C.GoString(q.name))
	}
	return out, nil
}

// Stats is xce_stats_t (F17).
type Stats struct {
	Requests, Retries, Rotations, Failovers, BackoffMs, LastFailoverMs uint64
	CurrentMaster                                                      int
}

// Stats reads the context's counters.
func (c *Client) Stats() (Stats, error) {
	if !c.enter() {
		return Stats{}, ErrClosed
	}
	defer c.mu.RUnlock()
	var st C.xce_stats_t
	if err := check("stats", C.xcecli_get_stats(c.ctx, &st)); err != nil {
		return Stats{}, err
	}
	return Stats{Requests: uint64(st.requests), Retries: uint64(st.retries),
		Rotations: uint64(st.rotations), Failovers: uint64(st.failovers),
		BackoffMs: uint64(st.backoff_ms), LastFailoverMs: uint64(st.last_failover_ms),
		CurrentMaster: int(st.current_master)}, nil
}

// LastError describes the last failed call (F19); "" when none failed.
func (c *Client) LastError() string {
	if !c.enter() {
		return ""
	}
	defer c.mu.RUnlock()
	n := C.xcecli_last_error_text(c.ctx, nil, 0)
	if n < 0 {
		return ""
	}
	buf := make([]byte, int(n)+1)
	C.xcecli_last_error_text(c.ctx, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	return string(buf[:n])
}
