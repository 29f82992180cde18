package faultproxy

import (
	"net"
	"time"
)

// SetKeepClients, while on, keeps a client's connection open when its
// server connection fails, and dials the current target again behind it,
// as proxies that hide a failover or a restart from their clients do
// (managed Redis endpoints): the client goes on sending commands on the
// same connection, now to another server process, and sees no new
// connection. Bytes in flight when the server failed are lost. Off, a
// failed server connection closes its client connection, as a plain TCP
// proxy does.
func (p *Proxy) SetKeepClients(on bool) {
	p.mu.Lock()
	p.keep = on
	p.mu.Unlock()
}

// redial returns the server connection to use after old failed: one that
// another goroutine of pr dialed already, or a new one to the current
// target, dialed until it answers. It returns nil, closing nothing, when
// clients are not kept or pr is closed.
func (p *Proxy) redial(pr *pair, old net.Conn) net.Conn {
	for {
		p.mu.Lock()
		target, keep := p.target, p.keep
		p.mu.Unlock()
		pr.mu.Lock()
		cur, closed := pr.server, pr.closed
		pr.mu.Unlock()
		switch {
		case !keep || closed:
			return nil
		case cur != old:
			return cur
		}
		s, err := net.DialTimeout("tcp", target, 100*time.Millisecond)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		pr.mu.Lock()
		if pr.closed || pr.server != old {
			pr.mu.Unlock()
			_ = s.Close()
			continue
		}
		pr.server = s
		pr.mu.Unlock()
		_ = old.Close()
		p.redialed.Add(1)
		return s
	}
}
