package app

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// certReloader serves the listener's certificate from --tls-cert-file/--tls-key-file and
// picks up rotated files (cert-manager, kubelet secret updates) on the next handshake after
// they change, without a restart. A pair that fails to load keeps the last good one.
type certReloader struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate
	certMod, keyMod   time.Time
	checked           time.Time
	now               func() time.Time
}

// certCheckEvery bounds how often a handshake stats the files.
const certCheckEvery = time.Second

func newCertReloader(certFile, keyFile string) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, now: time.Now}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) load() error {
	cs, err := os.Stat(r.certFile)
	if err != nil {
		return fmt.Errorf("--tls-cert-file: %w", err)
	}
	ks, err := os.Stat(r.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-key-file: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)
	}
	r.cert, r.certMod, r.keyMod = &cert, cs.ModTime(), ks.ModTime()
	return nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= certCheckEvery {
		r.checked = now
		cs, cerr := os.Stat(r.certFile)
		ks, kerr := os.Stat(r.keyFile)
		if cerr == nil && kerr == nil && (!cs.ModTime().Equal(r.certMod) || !ks.ModTime().Equal(r.keyMod)) {
			_ = r.load() // a half-written pair fails to load: keep serving the last good one
		}
	}
	return r.cert, nil
}
