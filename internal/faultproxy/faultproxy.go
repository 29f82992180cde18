// Package faultproxy is a small TCP proxy for fault-injection tests. It sits
// between a client (a lockgate gateway) and a server (a redis-server) on
// loopback and, on command, delays replies, drops replies after forwarding
// the request (the lost-reply case: the server ran the command, the client
// never hears of it), cuts every open connection, or keeps the client
// connections open while it dials a new server behind them.
//
// Faults apply to bytes flowing from the server to the client; requests are
// always forwarded. A Proxy with no fault set is a plain pass-through.
package faultproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards every connection accepted on Addr to a target address. It
// is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	delay  time.Duration
	rate   int // reply bytes per second; 0: no limit
	dropRq bool
	drop   bool
	keep   bool // see SetKeepClients
	once   bool // drop is turned off after one reply
	conns  map[*pair]struct{}
	closed bool
	wg     sync.WaitGroup

	accepted, dropped, cut, redialed atomic.Int64
}

// Stats counts what a Proxy did since it started.
type Stats struct {
	Accepted       int64 // client connections accepted
	DroppedReplies int64 // replies swallowed (each also closed its connection)
	CutConns       int64 // connections closed by Cut
	Redialed       int64 // server connections made again behind an open client connection
}

// pair is one client connection and the server connection it is
// forwarded to (another one after a re-dial: see SetKeepClients).
type pair struct {
	client net.Conn
	mu     sync.Mutex
	server net.Conn
	closed bool
}

func (p *pair) srv() net.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.server
}

func (p *pair) close() {
	p.mu.Lock()
	p.closed = true
	s := p.server
	p.mu.Unlock()
	_ = p.client.Close()
	_ = s.Close()
}

// Start listens on a free loopback port and forwards to target (host:port).
// Call Close to stop it.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[*pair]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// SetTarget sends the connections accepted from now on to target, and cuts
// the ones open: a fixed address whose server was replaced (a failover
// behind a cloud endpoint).
func (p *Proxy) SetTarget(target string) {
	p.Redirect(target)
	p.Cut()
}

// Redirect sends the connections accepted from now on to target, and
// keeps the ones open on the old one: a load balancer that drains a
// server it took out, so that a client's pool reaches both for a while.
func (p *Proxy) Redirect(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Addr is the proxy's listening host:port; clients connect here.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay makes every chunk of reply wait d before it is passed on; 0 turns
// the delay off. It applies to connections already open.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// SetRate passes replies on at most bytesPerSecond (in chunks of at most
// 1 KiB, each held for its share of the second); 0 turns the limit off,
// and what is still to pass then goes at once. It applies to connections
// already open.
func (p *Proxy) SetRate(bytesPerSecond int) {
	p.mu.Lock()
	p.rate = bytesPerSecond
	p.mu.Unlock()
}

// SetDropRequests, while on, swallows every request and closes its
// connection, so the server never sees it and the client sees a broken
// connection: a partition between this client and the server.
func (p *Proxy) SetDropRequests(on bool) {
	p.mu.Lock()
	p.dropRq = on
	p.mu.Unlock()
}

// SetDropReplies, while on, forwards requests to the server but swallows
// the first reply on each connection and then closes that connection, so
// the command ran on the server and the client sees only a broken
// connection.
func (p *Proxy) SetDropReplies(on bool) {
	p.mu.Lock()
	p.drop = on
	p.mu.Unlock()
}

// DropNextReply swallows the next reply only (the command ran; its
// connection is closed), then forwards again: a reply lost once, after
// which a client that sends the command again would be answered.
func (p *Proxy) DropNextReply() {
	p.mu.Lock()
	p.drop, p.once = true, true
	p.mu.Unlock()
}

// Cut closes every connection open now and returns how many it closed. New
// connections are accepted as before.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	open := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		open = append(open, c)
	}
	p.mu.Unlock()
	for _, c := range open {
		c.close()
	}
	p.cut.Add(int64(len(open)))
	return len(open)
}

// Heal turns every fault off (no delay, no rate limit, no dropped
// requests or replies).
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.delay, p.rate, p.dropRq, p.drop, p.once = 0, 0, false, false, false
	p.mu.Unlock()
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	return Stats{Accepted: p.accepted.Load(), DroppedReplies: p.dropped.Load(), CutConns: p.cut.Load(),
		Redialed: p.redialed.Load()}
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		s, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		pr := &pair{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			pr.close()
			return
		}
		p.conns[pr] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.requests(pr)
		go p.replies(pr)
	}
}

func (p *Proxy) forget(pr *pair) {
	pr.close()
	p.mu.Lock()
	delete(p.conns, pr)
	p.mu.Unlock()
}

// requests copies client → server unchanged, unless requests are dropped
// (to a server dialed again, when one fails while SetKeepClients is on).
func (p *Proxy) requests(pr *pair) {
	defer p.wg.Done()
	defer p.forget(pr)
	buf := make([]byte, 32<<10)
	for {
		n, err := pr.client.Read(buf)
		if n > 0 {
			p.mu.Lock()
			drop := p.dropRq
			p.mu.Unlock()
			if drop {
				return // the deferred forget closes both sides
			}
			s := pr.srv()
			for _, werr := s.Write(buf[:n]); werr != nil; _, werr = s.Write(buf[:n]) {
				if s = p.redial(pr, s); s == nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// replies copies server → client, applying the current faults per chunk.
func (p *Proxy) replies(pr *pair) {
	defer p.wg.Done()
	defer p.forget(pr)
	buf := make([]byte, 32<<10)
	s := pr.srv()
	for {
		p.mu.Lock()
		chunk := len(buf)
		if p.rate > 0 {
			chunk = 1 << 10
		}
		p.mu.Unlock()
		n, err := s.Read(buf[:chunk])
		if n > 0 {
			p.mu.Lock()
			delay, drop, rate := p.delay, p.drop, p.rate
			if drop && p.once {
				p.drop, p.once = false, false
			}
			p.mu.Unlock()
			if drop {
				p.dropped.Add(1)
				return // the deferred forget closes both sides
			}
			if delay > 0 {
				time.Sleep(delay)
			}
			if rate > 0 {
				time.Sleep(time.Duration(n) * time.Second / time.Duration(rate))
			}
			if _, werr := pr.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if s = p.redial(pr, s); s == nil {
				return
			}
		}
	}
}
