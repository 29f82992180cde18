package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
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

	if _, _, _, err := get(httpsClient(ca, nil), base+"/healthz"); err == nil {
		t.Error("a client without a certificate was served")
	}
	if _, _, _, err := get(httpsClient(ca, &stranger), base+"/healthz"); err == nil {
		t.Error("a client with a certificate from another CA was served")
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
