package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/freeport"
	"github.com/lockgate/lockgate/internal/redistest"
)

func TestMaskURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://u:s3cret@h:xx", "redis://u:xxxxx@h:xx"},
		{"redis://:s3cret@h:1/0", "redis://:xxxxx@h:1/0"},
		{"rediss://u:p@ss@h:1", "rediss://u:xxxxx@h:1"},
		{"redis://h:1", "redis://h:1"},
		{"redis://user@h:1", "redis://user@h:1"},
		{"u:s3cret@h:1", "u:xxxxx@h:1"},
	} {
		if got := maskURL(tc.in); got != tc.want {
			t.Errorf("maskURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A -redis value that does not parse is shown in the error, its password
// masked, instead of being dropped.
func TestAnUnparseableRedisURLIsShownMasked(t *testing.T) {
	for _, v := range []string{"redis://u:s3cret@h:xx", "redis://:s3cret@h:1,redis://u:s3cret@%zz:1"} {
		_, err := parseConfig([]string{"-redis", v}, envOf(nil), io.Discard)
		if err == nil {
			t.Fatalf("%s: accepted", v)
		}
		if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), ":xxxxx@") || strings.Contains(err.Error(), "unparseable") {
			t.Errorf("%s: %v; want the value with its password masked", v, err)
		}
	}
}

// -h names the type of each flag's argument, not "string" for all.
func TestHelpShowsTheTypeOfEachSetting(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseConfig([]string{"-h"}, envOf(nil), &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	help := out.String()
	for _, want := range []string{"-addr host:port", "-redis URLs", "-node-timeout duration", "-max-waiters count",
		"-auth-file file", "-tls-cert file", "-rate-limit per-second", "(env LOCKGATE_MAX_TTL)", `(default "1h")`} {
		if !strings.Contains(help, want) {
			t.Errorf("-h lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, " string\n") {
		t.Errorf("-h still calls an argument string:\n%s", help)
	}
	for _, s := range settings {
		if flagTypes[s.flag] == "" {
			t.Errorf("-%s has no type in flagTypes", s.flag)
		}
	}
}

// A port in use is reported under the name the address was given by, and
// LOCKGATE_ADDR is named only when it was set.
func TestAnAddressInUseNamesHowItWasGiven(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	for _, tc := range []struct {
		name      string
		args      []string
		env       map[string]string
		want, not string
	}{
		{"by flag", []string{"-addr", addr}, nil, `bad setting -addr "` + addr + `"`, "LOCKGATE_ADDR"},
		{"by variable", nil, map[string]string{"LOCKGATE_ADDR": addr}, `bad setting LOCKGATE_ADDR="` + addr + `"`, "-addr \""},
	} {
		err := run(t.Context(), tc.args, envOf(tc.env), io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), tc.not) {
			t.Errorf("%s: %v; want %q and not %q", tc.name, err, tc.want, tc.not)
		}
	}
	cfg, err := parseConfig(nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	msg := listenError(cfg, errors.New("address already in use")).Error()
	if strings.Contains(msg, "LOCKGATE_ADDR=") || !strings.Contains(msg, "the default address") {
		t.Errorf("default address in use: %q", msg)
	}
}

// A node that does not answer PING is named in a warning at start-up, and
// the gateway says when fewer than a quorum answer.
func TestStartupWarnsAboutSilentNodes(t *testing.T) {
	servers := redistest.StartN(t, 2, nil)
	deadPort := freeport.Ports(t, 1)[0]
	dead := "redis://127.0.0.1:" + strconv.Itoa(deadPort)
	g := startGateway(t, []string{"-redis", servers[0].URL() + "," + servers[1].URL() + "," + dead}, nil)
	logs := g.log.String()
	if !strings.Contains(logs, `"node":"127.0.0.1:`+strconv.Itoa(deadPort)+`"`) || !strings.Contains(logs, "does not answer PING") {
		t.Errorf("no warning naming the silent node:\n%s", logs)
	}
	if strings.Contains(logs, "fewer lock nodes answer than a quorum") {
		t.Error("a quorum answers, but the log says it does not")
	}
	if n := strings.Count(logs, "does not answer PING"); n != 1 {
		t.Errorf("%d PING warnings, want 1 (the two live nodes answer)", n)
	}

	g2 := startGateway(t, []string{"-redis", dead + ",redis://" + freeport.Addr(t)}, nil)
	if !strings.Contains(g2.log.String(), "fewer lock nodes answer than a quorum") {
		t.Errorf("no quorum warning with every node silent:\n%s", g2.log)
	}
}

// A port url.Parse accepts but no dial can use stops the start with a
// message naming the setting and the port, not a gateway answering 503 for
// ever.
func TestARedisPortOutOfRangeStopsTheStart(t *testing.T) {
	for _, tc := range []struct{ value, port string }{
		{"redis://:s3cret@127.0.0.1:70000", "70000"},
		{"redis://127.0.0.1:6379,redis://127.0.0.1:0", "0"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		started := false
		err := run(ctx, []string{"-addr", "127.0.0.1:0", "-shutdown-delay", "0s", "-redis", tc.value}, envOf(nil), io.Discard, func(string) { started = true; cancel() })
		cancel()
		if started || err == nil {
			t.Fatalf("%s: the gateway started", tc.value)
		}
		msg := err.Error()
		if !strings.Contains(msg, "bad setting -redis ") || // named as it was given (a flag)
			!strings.Contains(msg, "port "+tc.port+" is not from 1 to 65535") || strings.Contains(msg, "s3cret") {
			t.Errorf("%s: %q; want the setting and the port named, the password hidden", tc.value, msg)
		}
	}
}

// lockgate -h starts with the subcommands; an unknown one is named as such,
// with the list, and exits 64.
func TestHelpListsTheSubcommandsAndAnUnknownOneIsNamed(t *testing.T) {
	p := startLockgate(t, "-h")
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("-h: exit %d; stderr %s", code, p.stderr)
	}
	for _, want := range []string{"lockgate run --lock NAME", "lockgate acquire", "lockgate extend", "lockgate release",
		"lockgate status", "lockgate SUBCOMMAND -h", "-redis URLs"} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("-h lacks %q:\n%s", want, p.stderr)
		}
	}
	p = startLockgate(t, "frobnicate")
	if code := p.wait(t, 20*time.Second); code != exitUsage {
		t.Fatalf("frobnicate: exit %d, want %d; stderr %s", code, exitUsage, p.stderr)
	}
	if msg := p.stderr.String(); !strings.Contains(msg, `unknown subcommand "frobnicate"`) ||
		!strings.Contains(msg, "run, acquire, extend, release and status") || strings.Count(msg, "\n") != 1 {
		t.Errorf("frobnicate: stderr %q", msg)
	}
}
