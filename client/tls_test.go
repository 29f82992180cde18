package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

// selfSigned writes a self-signed client certificate (its own CA) and its
// key into dir and returns the two files and the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ = x509.ParseCertificate(der)
	return certFile, keyFile, cert
}

// Options.CAFile, CertFile and KeyFile reach a gateway that requires client
// certificates; a failed handshake is a *TLSError saying what to check, not
// a transient *NoAnswerError, so Lock does not retry it.
func TestTLSOptions(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, clientCert := selfSigned(t, dir)
	locker, err := lockcore.New([]lockcore.Node{memnode.New(nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(locker.Close)
	h, err := handlers.New(locker, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	pool := x509.NewCertPool()
	pool.AddCert(clientCert)
	srv.TLS = &tls.Config{ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(dir, "server-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	c, err := client.New(srv.URL, &client.Options{CAFile: caFile, CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lease, err := c.Acquire(ctx, "over-mtls", nil)
	if err != nil {
		t.Fatalf("acquire with the CA and a client certificate: %v", err)
	}
	if err := c.Release(ctx, "over-mtls", lease.LeaseID, 0); err != nil {
		t.Fatal(err)
	}

	for name, o := range map[string]*client.Options{
		"no CA":                 {CertFile: certFile, KeyFile: keyFile},
		"no client certificate": {CAFile: caFile},
	} {
		c, err := client.New(srv.URL, o)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = c.Lock(ctx, "over-mtls", &client.LockOptions{TTL: time.Second, Wait: 10 * time.Second})
		var te *client.TLSError
		if !errors.As(err, &te) || client.Transient(err) {
			t.Errorf("%s: %v, want a *TLSError, not transient", name, err)
		} else if !strings.Contains(te.Error(), "TLS with the gateway failed (acquire)") {
			t.Errorf("%s: %q", name, te)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: Lock retried a TLS failure for %v", name, took)
		}
	}

	for name, o := range map[string]*client.Options{
		"HTTPClient and CAFile": {HTTPClient: http.DefaultClient, CAFile: caFile},
		"a key without a cert":  {KeyFile: keyFile},
		"a CA file with no CA":  {CAFile: keyFile},
		"a missing CA file":     {CAFile: filepath.Join(dir, "absent")},
		"a key not the cert's":  {CertFile: certFile, KeyFile: caFile},
	} {
		if _, err := client.New(srv.URL, o); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}
