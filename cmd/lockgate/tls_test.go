package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/freeport"
	"github.com/lockgate/lockgate/internal/redistest"
)

// TestMain lets a test run this test binary as the gateway itself, with an
// environment of its own (TestRedisOverTLSWithAPassword needs SSL_CERT_FILE,
// which Go reads once per process).
func TestMain(m *testing.M) {
	if os.Getenv("LOCKGATETEST_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// writeCerts writes a CA and a server certificate for 127.0.0.1 into dir.
func writeCerts(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lockgate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", leafDER), write("server.key", "EC PRIVATE KEY", keyDER)
}

// A rediss:// URL with a password reaches a Redis that requires both, the
// certificate is checked against SSL_CERT_FILE, and the password appears
// nowhere in the log.
func TestRedisOverTLSWithAPassword(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writeCerts(t, dir)
	tlsPorts := freeport.Ports(t, 3)
	const password = "tls-s3cret-pw"
	var urls []string
	for _, p := range tlsPorts {
		s := redistest.Start(t, &redistest.Options{Args: []string{
			"--tls-port", strconv.Itoa(p), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
			"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no",
		}})
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		if err := rdb.ConfigSet(context.Background(), "requirepass", password).Err(); err != nil {
			t.Fatal(err)
		}
		rdb.Close()
		urls = append(urls, "rediss://:"+password+"@127.0.0.1:"+strconv.Itoa(p))
	}

	addr := freeport.Addr(t)
	logFile := filepath.Join(dir, "gateway.log")
	logOut, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer logOut.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{"LOCKGATETEST_RUN_MAIN=1", "SSL_CERT_FILE=" + caFile,
		"LOCKGATE_ADDR=" + addr, "LOCKGATE_REDIS=" + strings.Join(urls, ","),
		// A cold TLS connection (handshake, AUTH, script load) can take
		// longer than the default 50ms on a loaded machine under -race; this
		// test is about reaching the nodes, not about their latency.
		"LOCKGATE_NODE_TIMEOUT=250ms", "LOCKGATE_MIN_TTL=1s", "LOCKGATE_SHUTDOWN_DELAY=0s"}
	cmd.Stdout, cmd.Stderr = logOut, logOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("gateway log:\n%s", b)
		}
	})

	g := &gateway{base: "http://" + addr}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if resp, err := http.Get(g.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway never became ready over TLS")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if a := g.do(t, "PUT", "/locks/tls-1", ""); a.status != http.StatusCreated {
		t.Fatalf("acquire over TLS: %d %s", a.status, a.body)
	}
	b, _ := os.ReadFile(logFile)
	if strings.Contains(string(b), password) {
		t.Errorf("the log shows the Redis password:\n%s", b)
	}
	if !strings.Contains(string(b), "rediss://:xxxxx@127.0.0.1:") {
		t.Errorf("the configuration line does not show the masked rediss:// URLs:\n%s", b)
	}
}
