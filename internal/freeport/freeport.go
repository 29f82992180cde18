// Package freeport finds free loopback TCP ports for tests that start
// servers of their own (redis-server, lockgate, fencedkv) or need an
// address where nothing listens.
//
// A port is free when the kernel hands it out for 127.0.0.1:0 and, with
// AlsoFree, when each port at the given offsets can be bound too. It is
// free at that moment only: another process may take it before the caller
// binds it, so a caller that starts a server retries on a new port when
// the bind fails.
package freeport

import (
	"fmt"
	"net"
	"strconv"
	"testing"
)

// listenAny binds a port the kernel chooses; a variable so that a test can
// play a kernel that hands out a freed port again at once.
var listenAny = func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// attempts bounds how many kernel-chosen ports one pick tries before it
// gives up on finding one whose offset ports are free too.
const attempts = 50

// Option changes what counts as a free port.
type Option func(*config)

type config struct{ offsets []int }

// AlsoFree asks for a port p such that p+offset is free as well, for a
// server that listens on two ports (a Redis Cluster node listens on its
// port and on port+10000 for its cluster bus: AlsoFree(10000)). A port
// whose p+offset is above 65535 is never chosen.
func AlsoFree(offset int) Option {
	return func(c *config) { c.offsets = append(c.offsets, offset) }
}

// Port returns a loopback port that was free a moment ago (see the package
// doc), or an error when the kernel hands out none that suits.
func Port(opts ...Option) (int, error) {
	ports, err := pick(1, opts)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// Ports returns n distinct loopback ports that were free a moment ago; no
// port of one is a port (or an AlsoFree port) of another. It fails t when
// there are none.
func Ports(t testing.TB, n int, opts ...Option) []int {
	t.Helper()
	ports, err := pick(n, opts)
	if err != nil {
		t.Fatalf("freeport: %v", err)
	}
	return ports
}

// Addr returns "127.0.0.1:port" for a port that was free a moment ago: an
// address to start a server on, or one where nothing answers. It fails t
// when there is none.
func Addr(t testing.TB, opts ...Option) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(Ports(t, 1, opts...)[0])
}

// pick holds every port it chose (and their offset ports) until all n are
// chosen, so that they are distinct, then frees them.
func pick(n int, opts []Option) ([]int, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ls, port, err := pickOne(c.offsets)
		if err != nil {
			return nil, err
		}
		held = append(held, ls...)
		ports = append(ports, port)
	}
	return ports, nil
}

// pickOne binds a kernel-chosen port and every offset port of it, and
// returns the listeners, which the caller closes.
func pickOne(offsets []int) ([]net.Listener, int, error) {
	for range attempts {
		ls, port, err := tryOne(offsets)
		if err != nil {
			return nil, 0, err
		}
		if ls != nil {
			return ls, port, nil
		}
	}
	return nil, 0, fmt.Errorf("no free port with ports at offsets %v free too after %d tries", offsets, attempts)
}

// tryOne binds one kernel-chosen port and then its offset ports; it
// returns no listeners (and no error) when an offset port is taken.
func tryOne(offsets []int) ([]net.Listener, int, error) {
	l, err := listenAny()
	if err != nil {
		return nil, 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	ls := []net.Listener{l}
	for _, off := range offsets {
		other, err := listenPort(port + off)
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, 0, nil
		}
		ls = append(ls, other)
	}
	return ls, port, nil
}

// listenPort binds 127.0.0.1:port, refusing ports out of range.
func listenPort(port int) (net.Listener, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("port %d out of range", port)
	}
	return net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
}
