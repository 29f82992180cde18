package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/freeport"
	"github.com/lockgate/lockgate/internal/pgtest"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/internal/testlog"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    config
		wantErr string // substring; "" means success
	}{
		{name: "no flags and no environment mean memory on the default address",
			want: config{addr: "127.0.0.1:8081"}},
		{name: "environment variables configure everything",
			env:  map[string]string{envAddr: ":9000", envRedis: "redis://127.0.0.1:6380/2"},
			want: config{addr: ":9000", redisURL: "redis://127.0.0.1:6380/2"}},
		{name: "a flag wins over its environment variable",
			args: []string{"-addr", "127.0.0.1:7000", "-postgres", "postgres://u@h/db"},
			env:  map[string]string{envAddr: ":9000", envPostgres: "postgres://other@h/db"},
			want: config{addr: "127.0.0.1:7000", postgresDSN: "postgres://u@h/db"}},
		{name: "both stores at once are refused",
			args: []string{"-redis", "redis://h:6379"}, env: map[string]string{envPostgres: "postgres://u@h/db"},
			wantErr: "-redis (FENCEDKV_REDIS) and -postgres (FENCEDKV_POSTGRES) are both set"},
		{name: "an address without a port is refused",
			args: []string{"-addr", "localhost"}, wantErr: "-addr (FENCEDKV_ADDR)"},
		{name: "a port out of range is refused",
			env: map[string]string{envAddr: "127.0.0.1:70000"}, wantErr: "-addr (FENCEDKV_ADDR)"},
		{name: "a Redis URL with the wrong scheme is refused",
			args: []string{"-redis", "http://h:6379"}, wantErr: "-redis (FENCEDKV_REDIS)"},
		{name: "a bad Redis URL is refused without echoing its password",
			args: []string{"-redis", "redis://user:s3cret@h:6379/%zz"}, wantErr: "-redis (FENCEDKV_REDIS)"},
		{name: "a bad PostgreSQL DSN is refused",
			args: []string{"-postgres", "postgres://u@h:notaport/db"}, wantErr: "-postgres (FENCEDKV_POSTGRES)"},
		{name: "positional arguments are refused",
			args: []string{"serve"}, wantErr: `unexpected argument "serve"`},
		{name: "unknown flags are refused",
			args: []string{"-memory"}, wantErr: "flag provided but not defined: -memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseConfig(tt.args, env(tt.env), io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("error %q leaks the password", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if got != tt.want {
				t.Fatalf("config %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestHelpIsNotAnError(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-h"}, env(nil), &out, nil)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "-postgres") {
		t.Fatalf("run -h = %v, output %q", err, out.String())
	}
}

// startRun runs fencedkv with args until the test ends. It returns the base
// URL, the logs, and a function that stops the server and returns run's
// error.
func startRun(t *testing.T, args ...string) (string, *testlog.Buffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &testlog.Buffer{}
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), env(nil), logs,
			func(addr string) { addrc <- addr })
	}()
	stop := sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(15 * time.Second):
			return errors.New("run did not return within 15s of cancellation")
		}
	})
	select {
	case addr := <-addrc:
		t.Cleanup(func() { _ = stop() })
		return "http://" + addr, logs, stop
	case err := <-done:
		cancel()
		t.Fatalf("run failed to start: %v\nlogs:\n%s", err, logs)
	case <-time.After(15 * time.Second):
		cancel()
		t.Fatalf("run did not start listening within 15s\nlogs:\n%s", logs)
	}
	return "", nil, nil
}

func TestRunServesEachStoreAndShutsDown(t *testing.T) {
	tests := []struct {
		name    string
		args    func(t *testing.T) []string
		logLine string
	}{
		{"memory", func(*testing.T) []string { return nil }, "using the embedded in-memory store"},
		{"redis", func(t *testing.T) []string { return []string{"-redis", redistest.Start(t, nil).URL()} },
			`"store":"redis"`},
		{"postgres", func(t *testing.T) []string { return []string{"-postgres", pgtest.NewDatabase(t)} },
			`"store":"postgres"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, logs, stop := startRun(t, tt.args(t)...)
			if !strings.Contains(logs.String(), tt.logLine) {
				t.Errorf("start-up logs lack %q:\n%s", tt.logLine, logs)
			}
			for _, tok := range []string{"5", "7"} {
				req, _ := http.NewRequest(http.MethodPut, base+"/kv/k", strings.NewReader("v"+tok))
				req.Header.Set("Fencing-Token", tok)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					t.Fatalf("PUT token %s: status %d", tok, resp.StatusCode)
				}
			}
			req, _ := http.NewRequest(http.MethodPut, base+"/kv/k", strings.NewReader("late"))
			req.Header.Set("Fencing-Token", "5")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusConflict {
				t.Fatalf("late PUT token 5: status %d, want 409", resp.StatusCode)
			}
			if err := stop(); err != nil {
				t.Fatalf("run after cancellation: %v", err)
			}
			if !strings.Contains(logs.String(), `"message":"stopped"`) {
				t.Errorf("logs lack the stopped line:\n%s", logs)
			}
			if _, err := http.Get(base + "/healthz"); err == nil {
				t.Error("server still answers after shutdown")
			}
		})
	}
}

func TestRunFailsOnAnUnreachableStore(t *testing.T) {
	// A port that was free a moment ago: nothing answers there.
	dead := freeport.Addr(t)
	tests := []struct {
		name, flag, value, want string
	}{
		{"redis", "-redis", "redis://" + dead, "-redis (FENCEDKV_REDIS): Redis at " + dead + " does not answer"},
		{"postgres", "-postgres", "postgres://postgres@" + dead + "/postgres?sslmode=disable&connect_timeout=2",
			"-postgres (FENCEDKV_POSTGRES): PostgreSQL at 127.0.0.1:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), []string{"-addr", "127.0.0.1:0", tt.flag, tt.value}, env(nil), io.Discard, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestRunFailsOnABusyAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = run(context.Background(), []string{"-addr", ln.Addr().String()}, env(nil), io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "-addr (FENCEDKV_ADDR)") {
		t.Fatalf("run on a busy address = %v, want an -addr error", err)
	}
}
