// A program outside the libxce repository that uses the Go package as a user would: its
// go.mod requires github.com/xce-project/libxce/go (with a replace pointing at a checkout),
// and it links the installed library through pkg-config. It submits and reads back jobs for
// --duration and fails if any call fails; with --expect-failover it also fails when no
// failover happened (the check kills the primary while it runs).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/xce-project/libxce/go/xce"
)

func main() {
	masters := flag.String("masters", "", "host:port,host:port,…")
	duration := flag.Duration("duration", 8*time.Second, "how long to keep submitting")
	expectFailover := flag.Bool("expect-failover", false, "fail unless a failover happened")
	flag.Parse()

	ctx := context.Background()
	c, err := xce.Start(ctx, xce.Config{Masters: *masters, ClientName: "outside"})
	if err != nil {
		fmt.Println("start:", err)
		os.Exit(1)
	}
	join := xce.JoinSpec{Role: xce.RoleClient, Host: "outside"}
	rejoins := 0
	c.SetReconnectHandler(func(h *xce.Client) error {
		_, err := h.Join(context.Background(), join)
		if err == nil {
			rejoins++
		}
		return err
	})
	c.SetEventHandler(func(ev xce.Event) {
		if ev.Kind == xce.EventFailoverFinished {
			fmt.Printf("failover to %s in %v\n", ev.To, ev.Duration)
		}
	})
	if _, err := c.Join(ctx, join); err != nil {
		fmt.Println("join:", err)
		os.Exit(1)
	}
	// Served once: a kill from now on is a failover (F17). The check waits for this line.
	fmt.Println("outside: joined")

	calls, errs := 0, 0
	for end := time.Now().Add(*duration); time.Now().Before(end); {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		id, err := c.JobSubmit(cctx, xce.JobSpec{Name: fmt.Sprintf("outside-%d", calls), Command: "true"})
		if err == nil {
			var j xce.Job
			if j, err = c.JobInfo(cctx, id); err == nil && j.ID != id {
				err = fmt.Errorf("jobinfo %d answered job %d", id, j.ID)
			}
		}
		cancel()
		if err != nil {
			errs++
			fmt.Println("error:", err)
		} else {
			calls++
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, _ := c.Stats()
	if err := c.Close(); err != nil {
		fmt.Println("close:", err)
		errs++
	}
	fmt.Printf("outside: libxce %s, %d jobs submitted and read back, %d errors, %d failovers, %d re-joins\n",
		xce.Version(), calls, errs, st.Failovers, rejoins)
	if errs > 0 || calls == 0 || (*expectFailover && (st.Failovers < 1 || rejoins < 1)) {
		os.Exit(1)
	}
}
