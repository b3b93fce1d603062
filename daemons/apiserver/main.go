// xce-apiserver: the cluster's HTTP API over libxce, through the Go package.
//
//	xce-apiserver --masters H:P[,H:P...] [--listen 127.0.0.1:8080] [--name apiserver]
//	              [--call-timeout 30s] [--shutdown-timeout 10s]
//	(the masters may also come from $XCE_MASTERS)
//
// JSON endpoints (ids are decimal strings):
//
//	POST /v1/jobs                  {"name","command"[,"id","user","queue","ncpus","mem_mb"]} → 201 {"id"}
//	                               (with an "id", re-posting the same job is 200 {"existing":true})
//	GET  /v1/jobs[?state=PEND,RUN&user=U&queue=Q&limit=N]  → {"jobs":[…]}
//	GET  /v1/jobs/ID               → the job
//	POST /v1/jobs/ID/kill|suspend|resume|requeue
//	GET  /v1/workers, /v1/cluster, /v1/stats, /healthz
//	GET  /metrics                  the library's stats and the answers, Prometheus text format
//
// "cluster not ready" from the library (no primary within the retry budget) is 503 with
// {"error":"cluster not ready"} and Retry-After: 1. One *xce.Client serves every request
// (the library serialises calls on it; each request's context cancels its own call). It joins
// as an APISERVER and re-joins from the Go reconnect handler after every failover. SIGTERM or
// SIGINT: stop accepting, finish the requests in flight (up to --shutdown-timeout), close the
// client, print a summary line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xce-project/libxce/go/xce"
)

func main() {
	masters := flag.String("masters", os.Getenv("XCE_MASTERS"), "controllers, host:port,host:port,…")
	listen := flag.String("listen", "127.0.0.1:8080", "HTTP listen address (port 0: any free port)")
	name := flag.String("name", "apiserver", "session host name")
	callTimeout := flag.Duration("call-timeout", 30*time.Second, "deadline of one request's library call")
	shutdownTimeout := flag.Duration("shutdown-timeout", 10*time.Second, "grace for requests in flight at shutdown")
	flag.Parse()
	if *masters == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	log.SetFlags(0)
	log.SetOutput(logWriter{os.Stderr, *name})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// The library's log lines go through the Go logger.
	if err := xce.SetLogHandler(func(level int, msg string) { log.Printf("libxce: %s", msg) }); err != nil {
		log.Fatalf("set log handler: %v", err)
	}

	var c *xce.Client
	for {
		var err error
		c, err = xce.Start(ctx, xce.Config{Masters: *masters, ClientName: "xce-apiserver " + *name})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		log.Printf("start: %v (retrying)", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}

	s := &server{c: c, callTimeout: *callTimeout,
		reconnects: new(atomic.Uint64), rejoined: new(atomic.Uint64), rejoinFailed: new(atomic.Uint64)}
	join := xce.JoinSpec{Role: xce.RoleAPIServer, Host: *name}
	// F10: the session is gone after a failover; re-join before the interrupted call is re-sent.
	if err := c.SetReconnectHandler(func(h *xce.Client) error {
		s.reconnects.Add(1)
		sid, err := h.Join(context.Background(), join)
		if err != nil {
			s.rejoinFailed.Add(1)
			log.Printf("reconnect: re-join failed: %v", err)
			return err
		}
		s.rejoined.Add(1)
		log.Printf("reconnect: re-joined as APISERVER (session %d)", sid)
		return nil
	}); err != nil {
		log.Fatalf("set reconnect handler: %v", err)
	}
	if err := c.SetEventHandler(func(ev xce.Event) {
		if ev.Kind == xce.EventFailoverFinished {
			log.Printf("failover to %s in %v", ev.To, ev.Duration)
		}
	}); err != nil {
		log.Fatalf("set event handler: %v", err)
	}
	for {
		sid, err := c.Join(ctx, join)
		if err == nil {
			log.Printf("joined as APISERVER (session %d)", sid)
			break
		}
		if ctx.Err() != nil {
			c.Close()
			return
		}
		log.Printf("join: %v (retrying)", err)
		select {
		case <-ctx.Done():
			c.Close()
			return
		case <-time.After(time.Second):
		}
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("listen %s: %v", *listen, err)
	}
	log.Printf("listening on http://%s", ln.Addr())
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case <-ctx.Done():
	case err := <-served:
		log.Printf("serve: %v", err)
	}
	log.Printf("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Printf("shutdown: %v (closing the client ends the calls still running)", err)
	}
	cancel()
	st, _ := c.Stats()
	if err := c.Close(); err != nil {
		log.Printf("close: %v", err)
	}
	log.Printf("summary reconnects=%d rejoined=%d rejoin_failed=%d failovers=%d answers_2xx=%d answers_503_not_ready=%d answers_other=%d",
		s.reconnects.Load(), s.rejoined.Load(), s.rejoinFailed.Load(), st.Failovers,
		s.ok2xx.Load(), s.notReady503.Load(), s.other.Load())
}

// logWriter prefixes lines like the C daemons: UTC time with ms, program and name.
type logWriter struct {
	w    *os.File
	name string
}

func (l logWriter) Write(p []byte) (int, error) {
	ts := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	_, err := fmt.Fprintf(l.w, "%s xce-apiserver[%s] %s", ts, l.name, p)
	return len(p), err
}
