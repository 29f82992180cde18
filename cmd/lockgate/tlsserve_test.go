package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/internal/testlog"
)

// testCA signs certificates for the HTTPS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	file string
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	file := filepath.Join(dir, name+".pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pool: pool, file: file}
}

// issue writes a leaf certificate and its key, for a server on 127.0.0.1
// or a client, as certFile and keyFile, and returns it loaded.
func (ca *testCA) issue(t *testing.T, cn string, serial int64, server bool, certFile, keyFile string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: []string{"lockgate tests"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	// The key first, then the certificate: a reload between the two
	// writes sees a mismatched pair, which must be refused, not served.
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// httpsClient trusts ca and presents cert, if any. Each client has its own
// connections.
func httpsClient(ca *testCA, cert *tls.Certificate) *http.Client {
	tc := &tls.Config{RootCAs: ca.pool}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
}

func get(c *http.Client, url string, hdr ...string) (int, string, *tls.ConnectionState, error) {
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.TLS, nil
}

func do(c *http.Client, method, url string) (int, string, error) {
	req, _ := http.NewRequest(method, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func TestHTTPSWithACertificateMadeInTheTest(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "server-ca")
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.issue(t, "lockgate-1", 10, true, certFile, keyFile)
	g := startGateway(t, []string{"-tls-cert", certFile, "-tls-key", keyFile}, nil)
	base := strings.Replace(g.base, "http://", "https://", 1)

	c := httpsClient(ca, nil)
	status, body, _, err := get(c, base+"/healthz")
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /healthz over HTTPS: %d %s %v", status, body, err)
	}
	if status, body, err := do(c, "PUT", base+"/locks/over-tls"); err != nil || status != http.StatusCreated {
		t.Fatalf("acquire over HTTPS: %d %s %v", status, body, err)
	}
	// A client that does not trust the CA refuses the server.
	if _, _, _, err := get(&http.Client{Timeout: 5 * time.Second}, base+"/healthz"); err == nil {
		t.Error("a client without the CA accepted the server's certificate")
	}
	// Plain HTTP to the HTTPS port gets no lock service.
	if status, _, _, err := get(http.DefaultClient, g.base+"/healthz"); err == nil && status == http.StatusOK {
		t.Error("plain HTTP is served on the HTTPS port")
	}
	if !strings.Contains(g.log.String(), `"scheme":"https"`) {
		t.Errorf("the start-up line does not say https:\n%s", g.log)
	}
}

// With -tls-client-ca, /locks needs a client certificate signed by one of
// its CAs; the probe paths do not (a kubelet has none); a certificate of
// another CA, pushed at the handshake, is refused there.
func TestMutualTLSRefusesAClientWithoutACertificate(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "server-ca")
	clients := newTestCA(t, dir, "client-ca")
	other := newTestCA(t, dir, "other-ca")
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.issue(t, "lockgate-1", 10, true, certFile, keyFile)
	good := clients.issue(t, "billing-worker", 20, false, filepath.Join(dir, "c.pem"), filepath.Join(dir, "c.key"))
	stranger := other.issue(t, "stranger", 30, false, filepath.Join(dir, "s.pem"), filepath.Join(dir, "s.key"))
	g := startGateway(t, []string{"-tls-cert", certFile, "-tls-key", keyFile}, map[string]string{"LOCKGATE_TLS_CLIENT_CA": clients.file})
	base := strings.Replace(g.base, "http://", "https://", 1)

	// Go's client sends a certificate only if the server's list of
	// acceptable CAs names its issuer: the stranger's is not sent.
	for name, c := range map[string]*http.Client{"no certificate": httpsClient(ca, nil), "another CA's": httpsClient(ca, &stranger)} {
		for _, path := range probePaths {
			if status, body, _, err := get(c, base+path); err != nil || status != http.StatusOK {
				t.Errorf("%s: GET %s: %d %s %v; want 200 (a probe needs no certificate)", name, path, status, body, err)
			}
		}
		for _, m := range []string{"PUT", "GET"} {
			status, body, err := do(c, m, base+"/locks/mtls")
			if err != nil || status != http.StatusForbidden || !strings.Contains(body, "requires a client certificate") ||
				!strings.Contains(body, "urn:lockgate:problem:forbidden") {
				t.Errorf("%s: %s /locks/mtls: %d %s %v; want a 403 problem asking for a client certificate", name, m, status, body, err)
			}
		}
		if status, _, err := do(c, "GET", base+"/locks"); err != nil || status != http.StatusForbidden {
			t.Errorf("%s: GET /locks: %d %v; want 403", name, status, err)
		}
	}
	// A certificate the CAs did not sign, sent anyway, fails the handshake.
	pushy := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:              ca.pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &stranger, nil },
	}}}
	if status, _, _, err := get(pushy, base+"/healthz"); err == nil {
		t.Errorf("a certificate from another CA was accepted: %d", status)
	}

	c := httpsClient(ca, &good)
	if status, body, err := do(c, "PUT", base+"/locks/mtls"); err != nil || status != http.StatusCreated {
		t.Fatalf("acquire with a client certificate: %d %s %v", status, body, err)
	}
	// Without an auth file, the audit log names the caller by the
	// certificate's subject.
	if !strings.Contains(g.log.String(), `"caller":"CN=billing-worker,O=lockgate tests"`) {
		t.Errorf("the audit line does not name the client certificate's subject:\n%s", g.log)
	}
}

// The certificate is reloaded when its files change, and on SIGHUP; a
// connection made before keeps working; a bad pair keeps the one in force.
func TestCertificateReload(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "server-ca")
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.issue(t, "first", 10, true, certFile, keyFile)
	g := startGateway(t, []string{"-tls-cert", certFile, "-tls-key", keyFile}, nil)
	base := strings.Replace(g.base, "http://", "https://", 1)

	served := func(c *http.Client) string {
		t.Helper()
		_, _, st, err := get(c, base+"/healthz")
		if err != nil {
			t.Fatalf("GET /healthz: %v", err)
		}
		return st.PeerCertificates[0].Subject.CommonName
	}
	kept := httpsClient(ca, nil) // keeps its connection alive across reloads
	if cn := served(kept); cn != "first" {
		t.Fatalf("served %q, want first", cn)
	}

	ca.issue(t, "second", 11, true, certFile, keyFile)
	deadline := time.Now().Add(10 * time.Second)
	for served(httpsClient(ca, nil)) != "second" {
		if time.Now().After(deadline) {
			t.Fatalf("the changed certificate files were never reloaded:\n%s", g.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if cn := served(kept); cn != "first" {
		t.Errorf("the connection made before the reload answers with %q: it was dropped", cn)
	}

	// SIGHUP reloads at once, however seldom the files are checked.
	certCheckEvery.Store(int64(time.Hour))
	t.Cleanup(func() { certCheckEvery.Store(int64(time.Second)) })
	ca.issue(t, "third", 12, true, filepath.Join(dir, "c3.pem"), filepath.Join(dir, "k3.pem"))
	for _, f := range [][2]string{{"c3.pem", "cert.pem"}, {"k3.pem", "key.pem"}} {
		b, _ := os.ReadFile(filepath.Join(dir, f[0]))
		if err := os.WriteFile(filepath.Join(dir, f[1]), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for served(httpsClient(ca, nil)) != "third" {
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP did not reload the certificate:\n%s", g.log)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A key that does not match the certificate is refused; "third" stays.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(g.log.String(), "TLS certificate not reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("no log line for the bad pair:\n%s", g.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if cn := served(httpsClient(ca, nil)); cn != "third" {
		t.Errorf("after a bad pair the server answers with %q, want third", cn)
	}
}

func TestTLSSettingsAreCheckedAtStart(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.issue(t, "x", 10, true, certFile, keyFile)
	otherKey := filepath.Join(dir, "other.key")
	ca.issue(t, "y", 11, true, filepath.Join(dir, "other.pem"), otherKey)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a certificate without a key", []string{"-tls-cert", certFile}, "set both or neither"},
		{"a key without a certificate", []string{"-tls-key", keyFile}, "set both or neither"},
		{"a client CA without a certificate", []string{"-tls-client-ca", ca.file}, "set both or neither"},
		{"a missing file", []string{"-tls-cert", certFile, "-tls-key", filepath.Join(dir, "nope")}, "-tls-key"},
		{"a key that is not the certificate's", []string{"-tls-cert", certFile, "-tls-key", otherKey}, "private key does not match"},
		{"a client CA file with no certificate", []string{"-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", keyFile}, "holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), append([]string{"-addr", "127.0.0.1:0"}, tc.args...), envOf(nil), io.Discard, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestPlainListenerOnANonLoopbackAddressIsWarnedAbout(t *testing.T) {
	for _, tc := range []struct {
		addr string
		warn bool
	}{
		{"127.0.0.1:8080", false}, {"[::1]:8080", false}, {"0.0.0.0:8080", true}, {"[::]:8080", true}, {"10.1.2.3:8080", true},
	} {
		var buf testlog.Buffer
		addr, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		warnPlain(zerolog.New(&buf), addr)
		if got := strings.Contains(buf.String(), "without TLS"); got != tc.warn {
			t.Errorf("%s: warned %v, want %v: %s", tc.addr, got, tc.warn, buf.String())
		}
	}
}

// The client subcommands reach an mTLS gateway with --cacert, --cert and
// --key (or LOCKGATE_CACERT, LOCKGATE_CERT, LOCKGATE_KEY); without them they
// say it is a TLS or certificate matter, never "no answer".
func TestTheCLIAgainstAMutualTLSGateway(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "server-ca")
	clients := newTestCA(t, dir, "client-ca")
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.issue(t, "lockgate-1", 10, true, certFile, keyFile)
	cCert, cKey := filepath.Join(dir, "c.pem"), filepath.Join(dir, "c.key")
	clients.issue(t, "cli", 20, false, cCert, cKey)
	g := startGateway(t, []string{"-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", clients.file}, nil)
	base := strings.Replace(g.base, "http://", "https://", 1)
	tlsArgs := []string{"--gateway", base, "--cacert", ca.file, "--cert", cCert, "--key", cKey}
	call := func(env map[string]string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := subcommand(args[0], args[1:], envOf(env), &out, &errb)
		return code, out.String(), errb.String()
	}

	code, out, stderr := call(nil, append([]string{"acquire", "--ttl", "10s", "cli-mtls"}, tlsArgs...)...)
	var lease api.Lease
	if code != exitOK || json.Unmarshal([]byte(out), &lease) != nil || lease.FencingToken < 1 {
		t.Fatalf("acquire: %d %q %q", code, out, stderr)
	}
	idFile := filepath.Join(dir, "lease-id")
	if err := os.WriteFile(idFile, []byte(lease.LeaseID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := call(nil, append([]string{"extend", "--lease-id-file", idFile, "cli-mtls"}, tlsArgs...)...); code != exitOK {
		t.Fatalf("extend: %d %q %q", code, out, stderr)
	}
	// The same settings from the environment.
	env := map[string]string{"LOCKGATE_URL": base, "LOCKGATE_CACERT": ca.file, "LOCKGATE_CERT": cCert, "LOCKGATE_KEY": cKey}
	if code, out, stderr := call(env, "status", "cli-mtls"); code != exitOK || !strings.Contains(out, `"fencing_token"`) {
		t.Fatalf("status: %d %q %q", code, out, stderr)
	}
	if code, _, stderr := call(nil, append([]string{"release", "--lease-id-file", idFile, "cli-mtls"}, tlsArgs...)...); code != exitOK {
		t.Fatalf("release: %d %q", code, stderr)
	}
	p := startLockgate(t, append([]string{"run", "--lock", "cli-mtls-run"}, append(tlsArgs, "--", "sh", "-c", `test "$LOCKGATE_FENCING_TOKEN" -ge 1`)...)...)
	if got := p.wait(t, 20*time.Second); got != 0 {
		t.Fatalf("run: exit %d; stderr %s", got, p.stderr)
	}

	for _, tc := range []struct {
		name string
		args []string
		want int
		msg  []string
	}{
		{"no --cacert", []string{"status", "--gateway", base, "--cert", cCert, "--key", cKey, "x"}, exitFailed,
			[]string{"TLS with the gateway failed", "does not trust", "--cacert"}},
		{"no client certificate", []string{"status", "--gateway", base, "--cacert", ca.file, "x"}, exitDenied,
			[]string{"403", "requires a client certificate"}},
		{"http:// to the HTTPS gateway", []string{"status", "--gateway", g.base, "x"}, exitFailed,
			[]string{"TLS with the gateway failed", "use https://"}},
		{"--cert without --key", []string{"status", "--gateway", base, "--cert", cCert, "x"}, exitUsage,
			[]string{"--cert and --key"}},
		{"a --cacert with no certificate", []string{"status", "--gateway", base, "--cacert", cKey, "x"}, exitUsage,
			[]string{"holds no PEM certificate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := call(nil, tc.args...)
			if code != tc.want {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.want, stderr)
			}
			for _, m := range tc.msg {
				if !strings.Contains(stderr, m) {
					t.Errorf("stderr %q lacks %q", stderr, m)
				}
			}
			if strings.Contains(stderr, "no answer") || strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr %q: want one line, not \"no answer\"", stderr)
			}
		})
	}
	// run without a client certificate: access denied, and the command
	// does not start.
	p = startLockgate(t, "run", "--gateway", base, "--cacert", ca.file, "--lock", "cli-mtls-run", "--", "true")
	if got := p.wait(t, 20*time.Second); got != exitDenied || !strings.Contains(p.stderr.String(), "client certificate") {
		t.Fatalf("run without a certificate: exit %d, want %d; stderr %s", got, exitDenied, p.stderr)
	}
}

// TLS 1.2 is served with AEAD suites only: a client offering only CBC with
// SHA-1 is refused; one offering GCM is served.
func TestTLS12CipherSuites(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "server-ca")
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.issue(t, "lockgate-1", 10, true, certFile, keyFile)
	g := startGateway(t, []string{"-tls-cert", certFile, "-tls-key", keyFile}, nil)
	base := strings.Replace(g.base, "http://", "https://", 1)
	for _, tc := range []struct {
		suite uint16
		ok    bool
	}{
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, true},
		{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, true},
	} {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: ca.pool, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tc.suite},
		}}}
		_, _, st, err := get(c, base+"/healthz")
		if (err == nil) != tc.ok {
			t.Errorf("TLS 1.2 with only %s: served %v (%v), want %v", tls.CipherSuiteName(tc.suite), err == nil, err, tc.ok)
		}
		if err == nil && st.CipherSuite != tc.suite {
			t.Errorf("served with %s", tls.CipherSuiteName(st.CipherSuite))
		}
	}
}

// SIGHUP reloads -tls-client-ca with the certificate: a client of a CA put
// in the file is then served on /locks.
func TestSIGHUPReloadsTheClientCA(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "server-ca")
	first := newTestCA(t, dir, "first-ca")
	second := newTestCA(t, dir, "second-ca")
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.issue(t, "lockgate-1", 10, true, certFile, keyFile)
	newcomer := second.issue(t, "newcomer", 20, false, filepath.Join(dir, "n.pem"), filepath.Join(dir, "n.key"))
	caFile := filepath.Join(dir, "client-ca.pem")
	b, _ := os.ReadFile(first.file)
	if err := os.WriteFile(caFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	certCheckEvery.Store(int64(time.Hour)) // only SIGHUP reloads
	t.Cleanup(func() { certCheckEvery.Store(int64(time.Second)) })
	g := startGateway(t, []string{"-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", caFile}, nil)
	base := strings.Replace(g.base, "http://", "https://", 1)
	if status, _, err := do(httpsClient(ca, &newcomer), "PUT", base+"/locks/ca-reload"); err != nil || status != http.StatusForbidden {
		t.Fatalf("before the reload: %d %v, want 403", status, err)
	}
	b, _ = os.ReadFile(second.file)
	if err := os.WriteFile(caFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, body, err := do(httpsClient(ca, &newcomer), "PUT", base+"/locks/ca-reload")
		if err == nil && status == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGHUP: %d %s %v, want 201", status, body, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(g.log.String(), `"tls_client_ca":"`+caFile+`"`) {
		t.Errorf("the reload line does not name the client CA file:\n%s", g.log)
	}
}
