package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/freeport"
)

// Cluster is a Redis Cluster of redis-server processes owned by a test:
// shards primaries, each with replicas replicas, created with
// `redis-cli --cluster create`. Every server is killed when the test ends.
type Cluster struct {
	t       testing.TB
	Servers []*Server // in the order given to redis-cli: primaries first
}

// clusterNodeTimeout is cluster-node-timeout: how long a primary may not
// answer before its replica is promoted (about twice that in practice).
const clusterNodeTimeout = 1000

// StartCluster starts shards*(1+replicas) servers with cluster-enabled yes,
// no persistence and noeviction, joins them with `redis-cli --cluster
// create` (slots spread evenly over the primaries), and waits until every
// server reports cluster_state:ok and agrees on who serves every slot. It
// fails t when redis-cli is missing or the cluster does not form.
func StartCluster(t testing.TB, shards, replicas int) *Cluster {
	t.Helper()
	bin := Binary(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found in PATH: cluster tests need it (it comes with redis-server)")
	}
	c := &Cluster{t: t}
	for range shards * (1 + replicas) {
		s := &Server{t: t, bin: bin, dir: t.TempDir()}
		s.args = []string{"--bind", "127.0.0.1", "--save", "", "--dir", s.dir,
			"--protected-mode", "no", "--daemonize", "no", "--logfile", "redis.log",
			"--maxmemory-policy", "noeviction", "--repl-backlog-ttl", "0", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(clusterNodeTimeout),
			"--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0"}
		s.startCluster(t)
		c.Servers = append(c.Servers, s)
	}
	args := []string{"--cluster", "create"}
	for _, s := range c.Servers {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v: %s", err, out)
	}
	c.WaitStable()
	c.waitReplicas()
	return c
}

// waitReplicas waits (up to 20 s) until every replica has its first copy
// of its primary's data and a live link to it.
func (c *Cluster) waitReplicas() {
	c.t.Helper()
	for _, s := range c.Servers {
		deadline := time.Now().Add(20 * time.Second)
		for s.Info("role") == "slave" && (s.Info("master_link_status") != "up" || s.Info("master_sync_in_progress") != "0") {
			if time.Now().After(deadline) {
				c.t.Fatalf("redistest: replica %s not in sync after 20s", s.Addr())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// startCluster is start for a cluster server: its port and port+10000 (the
// cluster bus) must both be free.
func (s *Server) startCluster(t testing.TB) {
	t.Helper()
	var lastErr error
	for range 10 {
		port, err := freeport.Port(freeport.AlsoFree(10000)) // the bus port too
		if err != nil {
			t.Fatalf("redistest: no free port pair: %v", err)
		}
		s.port = port
		if lastErr = s.launch(); lastErr == nil {
			t.Cleanup(s.proc.Kill)
			return
		}
	}
	t.Fatalf("redistest: cluster redis-server did not start: %v", lastErr)
}

// URL is the cluster's redis-cluster:// URL, listing every server.
func (c *Cluster) URL() string {
	u := "redis-cluster://" + c.Servers[0].Addr()
	for i, s := range c.Servers[1:] {
		if i == 0 {
			u += "?"
		} else {
			u += "&"
		}
		u += "addr=" + s.Addr()
	}
	return u
}

// Do sends one command to s and returns its reply as text (arrays flattened
// one element per line; an error reply is returned as an error).
func (s *Server) Do(args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	var out strings.Builder
	err = readReply(bufio.NewReader(conn), &out)
	return out.String(), err
}

// readReply reads one RESP2 reply into out.
func readReply(r *bufio.Reader, out *strings.Builder) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return fmt.Errorf("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		out.WriteString(line[1:] + "\n")
	case '-':
		return fmt.Errorf("%s", line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			out.WriteString("\n")
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(r, buf); err != nil {
			return err
		}
		out.Write(buf[:n])
		out.WriteString("\n")
	case '*':
		n, _ := strconv.Atoi(line[1:])
		for range max(n, 0) {
			if err := readReply(r, out); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

func ioReadFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// NodeID is s's cluster node id.
func (s *Server) NodeID() string {
	s.t.Helper()
	id, err := s.Do("CLUSTER", "MYID")
	if err != nil {
		s.t.Fatalf("redistest: CLUSTER MYID on %s: %v", s.Addr(), err)
	}
	return strings.TrimSpace(id)
}

// Info reads one field of s's INFO (all sections), or "".
func (s *Server) Info(field string) string {
	info, err := s.Do("INFO", "everything")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// clusterState is cluster_state from s's CLUSTER INFO, or "".
func (s *Server) clusterState() string {
	info, err := s.Do("CLUSTER", "INFO")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "cluster_state:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Primaries returns the running servers that are primaries now, in
// c.Servers order.
func (c *Cluster) Primaries() []*Server {
	var out []*Server
	for _, s := range c.Servers {
		if s.Running() && s.Info("role") == "master" {
			out = append(out, s)
		}
	}
	return out
}

// slotOwners reads, from s, the node id serving each slot ("" when none).
func (s *Server) slotOwners() ([]string, error) {
	out, err := s.Do("CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	owners := make([]string, 16384)
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
			continue
		}
		setOwner(owners, f[0], f[8:])
	}
	return owners, nil
}

// setOwner records id as the owner of the slot ranges of a CLUSTER NODES
// line ("0-5460", "7", and "[slot->-id]" for a slot being moved, skipped).
func setOwner(owners []string, id string, ranges []string) {
	for _, r := range ranges {
		if strings.HasPrefix(r, "[") {
			continue
		}
		lo, hi, ok := strings.Cut(r, "-")
		if !ok {
			hi = lo
		}
		a, _ := strconv.Atoi(lo)
		b, _ := strconv.Atoi(hi)
		for i := a; i <= b && i < len(owners); i++ {
			owners[i] = id
		}
	}
}

// WaitStable waits (up to 20 s) until every running server reports
// cluster_state:ok and all of them agree on the owner of every slot.
func (c *Cluster) WaitStable() {
	c.t.Helper()
	var why string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if why = c.unstable(); why == "" {
			return
		}
	}
	c.t.Fatalf("redistest: cluster not stable after 20s: %s", why)
}

// unstable says why the cluster is not stable, or "".
func (c *Cluster) unstable() string {
	var first []string
	for _, s := range c.Servers {
		if !s.Running() {
			continue
		}
		if st := s.clusterState(); st != "ok" {
			return s.Addr() + " cluster_state " + st
		}
		owners, err := s.slotOwners()
		if err != nil {
			return err.Error()
		}
		if slices.Contains(owners, "") {
			return s.Addr() + " sees a slot without an owner"
		}
		if first == nil {
			first = owners
		} else if !slices.Equal(first, owners) {
			return s.Addr() + " disagrees on slot owners"
		}
	}
	return ""
}

// OwnerOf returns the primary that serves slot now.
func (c *Cluster) OwnerOf(slot int) *Server {
	c.t.Helper()
	for _, p := range c.Primaries() {
		owners, err := p.slotOwners()
		if err != nil {
			continue
		}
		for _, s := range c.Servers {
			if s.Running() && s.NodeID() == owners[slot] {
				return s
			}
		}
	}
	c.t.Fatalf("redistest: no owner of slot %d", slot)
	return nil
}

// MoveSlot migrates slot from src to dst the way `redis-cli --cluster
// reshard` does: SETSLOT IMPORTING on dst, MIGRATING on src, MIGRATE of
// its keys batch by batch (pause between batches, so that traffic meets
// the slot half moved), then SETSLOT NODE on both and on every other
// primary.
func (c *Cluster) MoveSlot(slot int, src, dst *Server, pause time.Duration) error {
	sl := strconv.Itoa(slot)
	srcID, dstID := src.NodeID(), dst.NodeID()
	if _, err := dst.Do("CLUSTER", "SETSLOT", sl, "IMPORTING", srcID); err != nil {
		return fmt.Errorf("importing: %w", err)
	}
	if _, err := src.Do("CLUSTER", "SETSLOT", sl, "MIGRATING", dstID); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	if err := migrateKeys(sl, src, dst, pause); err != nil {
		return err
	}
	for _, s := range []*Server{dst, src} {
		if _, err := s.Do("CLUSTER", "SETSLOT", sl, "NODE", dstID); err != nil {
			return fmt.Errorf("setslot node on %s: %w", s.Addr(), err)
		}
	}
	for _, p := range c.Primaries() {
		if p != src && p != dst {
			_, _ = p.Do("CLUSTER", "SETSLOT", sl, "NODE", dstID)
		}
	}
	return nil
}

// migrateKeys moves slot's keys from src to dst, three at a time, pause
// apart.
func migrateKeys(slot string, src, dst *Server, pause time.Duration) error {
	host, port, _ := net.SplitHostPort(dst.Addr())
	for {
		out, err := src.Do("CLUSTER", "GETKEYSINSLOT", slot, "3")
		if err != nil {
			return fmt.Errorf("getkeysinslot: %w", err)
		}
		keys := strings.Fields(out)
		if len(keys) == 0 {
			return nil
		}
		args := append([]string{"MIGRATE", host, port, "", "0", "5000", "REPLACE", "KEYS"}, keys...)
		if _, err := src.Do(args...); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		time.Sleep(pause)
	}
}

// ReplicaOf returns a running replica of primary p, or nil.
func (c *Cluster) ReplicaOf(p *Server) *Server {
	id := p.NodeID()
	for _, s := range c.Servers {
		if s != p && s.Running() && s.Info("role") == "slave" {
			if out, err := s.Do("CLUSTER", "NODES"); err == nil && strings.Contains(out, "myself,slave "+id) {
				return s
			}
		}
	}
	return nil
}

// KillAndPromote kills primary p and waits (up to 20 s) until its replica
// r is a primary and the cluster is stable again. It fails t otherwise.
func (c *Cluster) KillAndPromote(p, r *Server) {
	c.t.Helper()
	p.Kill()
	deadline := time.Now().Add(20 * time.Second)
	for r.Info("role") != "master" {
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: replica %s not promoted after 20s", r.Addr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.WaitStable()
}
