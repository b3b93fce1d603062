// Package cluster runs a local cluster of real xce-controller processes on loopback for the
// daemons' tests and the whole-system test: start N nodes (`xce-controller run`), find the
// primary, kill -9 one node and start it again from its data directory, stop everything.
package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xce-project/libxce/go/xce"
)

// Node is one controller.
type Node struct {
	ID     int
	Client string // host:port of the client protocol
	Raft   string
	cmd    *exec.Cmd
	done   chan struct{}
}

// Running reports whether the node's process is alive.
func (n *Node) Running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Pid is the node's process id (0 when not running).
func (n *Node) Pid() int {
	if !n.Running() {
		return 0
	}
	return n.cmd.Process.Pid
}

// Cluster is N controller processes, each with a data directory under Dir.
type Cluster struct {
	Bin   string
	Dir   string
	Nodes []*Node
	Extra []string // more `run` flags for every node

	mu    sync.Mutex
	probe *xce.Client
}

// FreePorts returns n distinct free loopback ports.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Start starts n nodes with data directories under dir; node logs go to dir/node-ID.log.
func Start(bin, dir string, n int, extra ...string) (*Cluster, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("xce-controller: %w", err)
	}
	ports, err := FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Bin: bin, Dir: dir, Extra: extra}
	for i := 0; i < n; i++ {
		c.Nodes = append(c.Nodes, &Node{ID: i + 1,
			Client: fmt.Sprintf("127.0.0.1:%d", ports[i]),
			Raft:   fmt.Sprintf("127.0.0.1:%d", ports[n+i])})
	}
	for _, node := range c.Nodes {
		if err := c.spawn(node); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// Spec is the `--cluster` argument.
func (c *Cluster) Spec() string {
	var parts []string
	for _, n := range c.Nodes {
		parts = append(parts, fmt.Sprintf("%d=%s/%s", n.ID, n.Client, n.Raft))
	}
	return strings.Join(parts, ",")
}

// Masters is the library's master list.
func (c *Cluster) Masters() string {
	var parts []string
	for _, n := range c.Nodes {
		parts = append(parts, n.Client)
	}
	return strings.Join(parts, ",")
}

func (c *Cluster) spawn(n *Node) error {
	data := filepath.Join(c.Dir, fmt.Sprintf("node-%d", n.ID))
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(c.Dir, fmt.Sprintf("node-%d.log", n.ID)),
		os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := append([]string{"run", "--id", fmt.Sprint(n.ID), "--cluster", c.Spec(), "--data", data}, c.Extra...)
	cmd := exec.Command(c.Bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Die with the test process even when it is killed (no orphan controllers).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	n.cmd = cmd
	n.done = make(chan struct{})
	go func(done chan struct{}) {
		cmd.Wait()
		logf.Close()
		close(done)
	}(n.done)
	return nil
}

// Node returns the node with this id.
func (c *Cluster) Node(id int) *Node { return c.Nodes[id-1] }

// Kill sends SIGKILL to node id and waits for it to exit.
func (c *Cluster) Kill(id int) {
	n := c.Node(id)
	if n.Running() {
		n.cmd.Process.Signal(syscall.SIGKILL)
		<-n.done
	}
}

// Restart starts a killed node again from its data directory.
func (c *Cluster) Restart(id int) error {
	c.Kill(id)
	return c.spawn(c.Node(id))
}

// Primary asks the cluster who is primary: a hello through the library (configured with every
// master) is answered by the primary only, with its id. Bounded by timeout.
func (c *Cluster) Primary(timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.probe == nil {
			p, err := xce.Start(ctx, xce.Config{Masters: c.Masters(), ClientName: "cluster-probe"})
			if err == nil {
				c.probe = p
				p.SetOption(xce.OptReplyTimeoutMs, 500)
				p.SetOption(xce.OptConnectTimeoutMs, 300)
			}
		}
		if c.probe != nil {
			info, err := c.probe.Hello(ctx)
			if err == nil && info.Role == xce.CtrlPrimary && c.Node(int(info.ID)).Running() {
				return int(info.ID), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no primary within %v", timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop kills every node (SIGTERM, then SIGKILL after 5 s) and closes the probe client.
func (c *Cluster) Stop() {
	c.mu.Lock()
	if c.probe != nil {
		c.probe.Close()
		c.probe = nil
	}
	c.mu.Unlock()
	for _, n := range c.Nodes {
		if n.Running() {
			n.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(5 * time.Second)
	for _, n := range c.Nodes {
		if n.cmd == nil {
			continue
		}
		select {
		case <-n.done:
		case <-deadline:
			n.cmd.Process.Signal(syscall.SIGKILL)
			<-n.done
		}
	}
}
