package faultproxy_test

import (
	"bufio"
	"fmt"
	"net"

	"github.com/lockgate/lockgate/internal/faultproxy"
)

// Example puts a proxy in front of a line-echo server and loses one reply:
// the server still receives the request.
func Example() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	got := make(chan string, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					got <- line
					c.Write([]byte(line))
				}
			}()
		}
	}()

	p, _ := faultproxy.Start(ln.Addr().String())
	defer p.Close()
	ask := func(msg string) {
		c, _ := net.Dial("tcp", p.Addr())
		defer c.Close()
		fmt.Fprintln(c, msg)
		reply, err := bufio.NewReader(c).ReadString('\n')
		fmt.Printf("sent %q: server got %q, client got %q (err %v)\n", msg, <-got, reply, err)
	}
	ask("one")
	p.SetDropReplies(true)
	ask("two")
	p.Heal()
	ask("three")
	// Output:
	// sent "one": server got "one\n", client got "one\n" (err <nil>)
	// sent "two": server got "two\n", client got "" (err EOF)
	// sent "three": server got "three\n", client got "three\n" (err <nil>)
}
