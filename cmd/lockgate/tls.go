package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
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
		setting{"tls-client-ca", "LOCKGATE_TLS_CLIENT_CA", "", "PEM file of the CAs that sign client certificates: every client must present one (mTLS); needs -tls-cert", func(c *config, v string) error {
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

// certReloader serves the certificate of a cert and key file pair, reading
// them again when their modification times or sizes change (checked at most
// once per certCheckEvery, at a handshake) or on reload. A pair that does
// not load is logged and the certificate in force stays. Connections already
// made keep the certificate they were made with.
type certReloader struct {
	certFile, keyFile string
	log               zerolog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // the files' sizes and modification times when loaded
	checked time.Time
}

func newCertReloader(certFile, keyFile string, log zerolog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) fileStamp() string {
	s := ""
	for _, f := range []string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			s += fmt.Sprintf("%d/%d;", fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return s
}

// load reads the pair. r.mu must be held, or r not yet shared.
func (r *certReloader) load() error {
	stamp := r.fileStamp()
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("bad setting -tls-cert/-tls-key (LOCKGATE_TLS_CERT/LOCKGATE_TLS_KEY): %w", err)
	}
	if c.Leaf != nil && time.Now().After(c.Leaf.NotAfter) {
		r.log.Warn().Str("tls_cert", r.certFile).Time("not_after", c.Leaf.NotAfter).Msg("the TLS certificate has expired")
	}
	r.cert, r.stamp = &c, stamp
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
			Msg("TLS certificate not reloaded: the certificate in force stays")
		return
	}
	ev := r.log.Info().Str("tls_cert", r.certFile).Str("trigger", why)
	if r.cert.Leaf != nil {
		ev = ev.Str("subject", r.cert.Leaf.Subject.String()).Time("not_after", r.cert.Leaf.NotAfter)
	}
	ev.Msg("TLS certificate loaded")
}

// GetCertificate is tls.Config.GetCertificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
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
	return r.cert, nil
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
	certs, err := newCertReloader(s.cert, s.key, log)
	if err != nil {
		return nil, "", err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate}
	if s.clientCA != "" {
		b, err := os.ReadFile(s.clientCA)
		if err != nil {
			return nil, "", fmt.Errorf("bad setting -tls-client-ca (LOCKGATE_TLS_CLIENT_CA): %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, "", fmt.Errorf("bad setting -tls-client-ca (LOCKGATE_TLS_CLIENT_CA): %s holds no PEM certificate", s.clientCA)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
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
