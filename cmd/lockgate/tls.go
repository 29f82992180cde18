package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/api"
)

// tlsSettings are the listener's TLS settings (see settings).
type tlsSettings struct {
	cert, key, clientCA string
}

func init() {
	settings = append(settings,
		setting{"tls-cert", "LOCKGATE_TLS_CERT", "", "PEM certificate (chain) file: serve HTTPS; reloaded when it changes or on SIGHUP; needs -tls-key", func(c *config, v string) error {
			c.tls.cert = v
			return pemFile(v, "CERTIFICATE")
		}},
		setting{"tls-key", "LOCKGATE_TLS_KEY", "", "PEM private key file of -tls-cert", func(c *config, v string) error {
			c.tls.key = v
			return pemFile(v, "PRIVATE KEY")
		}},
		setting{"tls-client-ca", "LOCKGATE_TLS_CLIENT_CA", "", "PEM file of the CAs that sign client certificates: /locks needs one (mTLS), probes (/livez, /healthz, /readyz, /metrics, /openapi.yaml) do not; reloaded with -tls-cert; needs -tls-cert", func(c *config, v string) error {
			c.tls.clientCA = v
			if v == "" {
				return nil
			}
			b, err := os.ReadFile(v)
			if err != nil {
				return err
			}
			if !x509.NewCertPool().AppendCertsFromPEM(b) {
				return fmt.Errorf("%s holds no PEM certificate", v)
			}
			return nil
		}},
	)
}

// pemFile checks that path ("" passes) is a readable file holding a PEM
// block whose type ends with kind. Whether the pair matches is checked when
// it is loaded.
func pemFile(path, kind string) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return fmt.Errorf("%s holds no PEM %s", path, kind)
		}
		if strings.HasSuffix(block.Type, kind) {
			return nil
		}
	}
}

// certCheckEvery bounds how often a handshake checks whether the certificate
// files changed (a time.Duration; tests change it).
var certCheckEvery atomic.Int64

func init() { certCheckEvery.Store(int64(time.Second)) }

// certReloader serves the certificate of a cert and key file pair, and the
// client CAs of -tls-client-ca if set, reading the files again when their
// modification times or sizes change (checked at most once per
// certCheckEvery, at a handshake) or on reload. Files that do not load are
// logged and the certificate and CAs in force stay. Connections already
// made keep what they were made with.
type certReloader struct {
	certFile, keyFile, caFile string
	log                       zerolog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	cas     *x509.CertPool // nil without caFile
	stamp   string         // the files' sizes and modification times when loaded
	checked time.Time
}

func newCertReloader(certFile, keyFile, caFile string, log zerolog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, caFile: caFile, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) fileStamp() string {
	s := ""
	for _, f := range []string{r.certFile, r.keyFile, r.caFile} {
		if fi, err := os.Stat(f); err == nil {
			s += fmt.Sprintf("%d/%d;", fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return s
}

// load reads the pair and the client CAs; nothing changes unless all load.
// r.mu must be held, or r not yet shared.
func (r *certReloader) load() error {
	stamp := r.fileStamp()
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("bad setting -tls-cert/-tls-key (LOCKGATE_TLS_CERT/LOCKGATE_TLS_KEY): %w", err)
	}
	var cas *x509.CertPool
	if r.caFile != "" {
		b, err := os.ReadFile(r.caFile)
		if err != nil {
			return fmt.Errorf("bad setting -tls-client-ca (LOCKGATE_TLS_CLIENT_CA): %w", err)
		}
		cas = x509.NewCertPool()
		if !cas.AppendCertsFromPEM(b) {
			return fmt.Errorf("bad setting -tls-client-ca (LOCKGATE_TLS_CLIENT_CA): %s holds no PEM certificate", r.caFile)
		}
	}
	if c.Leaf != nil && time.Now().After(c.Leaf.NotAfter) {
		r.log.Warn().Str("tls_cert", r.certFile).Time("not_after", c.Leaf.NotAfter).Msg("the TLS certificate has expired")
	}
	r.cert, r.cas, r.stamp = &c, cas, stamp
	return nil
}

// reload reads the pair again, logging the result.
func (r *certReloader) reload(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked = time.Now()
	if err := r.load(); err != nil {
		r.stamp = r.fileStamp() // do not retry a bad pair at every handshake
		r.log.Error().Str("tls_cert", r.certFile).Str("reason", err.Error()).Str("trigger", why).
			Msg("TLS certificate not reloaded: the certificate and client CAs in force stay")
		return
	}
	ev := r.log.Info().Str("tls_cert", r.certFile).Str("trigger", why)
	if r.cert.Leaf != nil {
		ev = ev.Str("subject", r.cert.Leaf.Subject.String()).Time("not_after", r.cert.Leaf.NotAfter)
	}
	if r.caFile != "" {
		ev = ev.Str("tls_client_ca", r.caFile)
	}
	ev.Msg("TLS certificate loaded")
}

// current returns the certificate and client CAs in force, reloading them
// first if their files changed.
func (r *certReloader) current() (*tls.Certificate, *x509.CertPool) {
	r.mu.Lock()
	due := time.Since(r.checked) >= time.Duration(certCheckEvery.Load())
	if due {
		r.checked = time.Now()
	}
	changed := due && r.fileStamp() != r.stamp
	r.mu.Unlock()
	if changed {
		r.reload("file changed")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, r.cas
}

// GetCertificate is tls.Config.GetCertificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c, _ := r.current()
	return c, nil
}

// configFor returns base's GetConfigForClient: base with the certificate and
// client CAs in force at this handshake.
func (r *certReloader) configFor(base *tls.Config) func(*tls.ClientHelloInfo) (*tls.Config, error) {
	return func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c, cas := r.current()
		tc := base.Clone()
		tc.GetConfigForClient, tc.GetCertificate = nil, nil
		tc.Certificates, tc.ClientCAs = []tls.Certificate{*c}, cas
		return tc, nil
	}
}

// cipherSuites are the TLS 1.2 suites served: ECDHE key exchange with AEAD
// ciphers only (no CBC, no SHA-1 MACs, no static RSA). TLS 1.3's suites are
// all of that kind and not configurable.
var cipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// serveTLS wraps ln in TLS when -tls-cert is set, reloading the certificate
// on SIGHUP until ctx ends; otherwise it warns when ln is not on a loopback
// address. It returns the listener to serve and the URL scheme; on error it
// has closed ln.
func serveTLS(ctx context.Context, cfg *config, log zerolog.Logger, ln net.Listener) (net.Listener, string, error) {
	tl, scheme, err := wrapTLS(ctx, cfg, log, ln)
	if err != nil {
		ln.Close()
	}
	return tl, scheme, err
}

func wrapTLS(ctx context.Context, cfg *config, log zerolog.Logger, ln net.Listener) (net.Listener, string, error) {
	s := cfg.tls
	switch {
	case s.cert == "" && s.key == "" && s.clientCA == "":
		warnPlain(log, ln.Addr())
		return ln, "http", nil
	case s.cert == "" || s.key == "":
		return nil, "", errors.New("bad setting -tls-cert/-tls-key (LOCKGATE_TLS_CERT/LOCKGATE_TLS_KEY): set both or neither")
	}
	certs, err := newCertReloader(s.cert, s.key, s.clientCA, log)
	if err != nil {
		return nil, "", err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: cipherSuites, GetCertificate: certs.GetCertificate}
	if s.clientCA != "" {
		// A certificate, if given, must be signed by one of the CAs; one
		// is asked for but not required at the handshake, so that probes
		// (a kubelet has none) reach /livez, /healthz and /readyz.
		// requireClientCert refuses every other path without one.
		tc.ClientAuth = tls.VerifyClientCertIfGiven
		tc.GetConfigForClient = certs.configFor(tc)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-hup:
				certs.reload("SIGHUP")
			case <-ctx.Done():
				return
			}
		}
	}()
	log.Info().Str("tls_cert", s.cert).Bool("client_certificates_required", s.clientCA != "").Msg("serving HTTPS")
	if s.clientCA != "" {
		log.Info().Str("tls_client_ca", s.clientCA).Strs("open_paths", probePaths).
			Msg("client certificates required, except on the probe paths")
	}
	return tls.NewListener(ln, tc), "https", nil
}

// warnPlain warns that lease ids and bearer tokens would cross the network
// in clear text when addr is not a loopback address.
func warnPlain(log zerolog.Logger, addr net.Addr) {
	host, _, _ := net.SplitHostPort(addr.String())
	if isLoopback(host) {
		return
	}
	log.Warn().Str("addr", addr.String()).Msg("listening on a non-loopback address without TLS: lease ids and bearer tokens " +
		"cross the network in clear text; set -tls-cert and -tls-key (LOCKGATE_TLS_CERT, LOCKGATE_TLS_KEY) or put a TLS proxy in front")
}

// probePaths are the paths a client without a certificate reaches under
// -tls-client-ca: liveness, readiness, metrics and the contract. They answer
// nothing about locks, and need no bearer token either.
var probePaths = []string{"/healthz", "/livez", "/readyz", "/metrics", "/openapi.yaml"}

// requireClientCert refuses, with 403, a request without a verified client
// certificate on any path but probePaths (the listener, with
// VerifyClientCertIfGiven, has already refused a certificate no -tls-client-ca
// authority signed).
func requireClientCert(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.TLS != nil && len(r.TLS.VerifiedChains) > 0) || slices.Contains(probePaths, r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", api.MediaProblem)
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(api.Problem{
			Type: api.ProblemForbidden, Title: "Forbidden", Status: http.StatusForbidden, Instance: r.URL.Path,
			Detail: "this gateway requires a client certificate (mutual TLS): present one signed by an authority of its -tls-client-ca",
		})
	})
}
