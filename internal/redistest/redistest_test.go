package redistest

import (
	"testing"
	"time"
)

func TestServerLifecycle(t *testing.T) {
	s := Start(t, &Options{AOF: true})
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("fresh server does not answer PING: %v", err)
	}
	s.Pause()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("paused server answered PING")
	}
	s.Resume()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("resumed server does not answer PING: %v", err)
	}
	s.Kill()
	if s.Running() {
		t.Fatal("killed server still reported as running")
	}
	deadline := time.Now().Add(time.Second)
	for ping(s.Addr()) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := ping(s.Addr()); err == nil {
		t.Fatal("killed server still answers PING")
	}
	s.Restart()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("restarted server does not answer PING: %v", err)
	}
}
